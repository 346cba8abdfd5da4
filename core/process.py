"""Start-up shared by the long-running model components (trainer, dream generator)."""

from __future__ import annotations

import signal
import threading

from core.config import Config
from core.metrics import MetricsEndpoint


def start_component(
    cfg: Config,
    component: str,
    component_id: str,
    stop: threading.Event | None = None,
    labels: dict[str, str] | None = None,
) -> threading.Event:
    """torch threads from ``cfg.threads``, SIGTERM -> ``stop``, metrics endpoint registered (its
    scrape target with ``labels`` besides component, component_id, run and pid)."""
    import torch

    torch.set_num_threads(cfg.threads)
    # denormal floats (values decaying below float32's normal range during training; which
    # tensors hold them was not traced) cost x86 cores 10-100x per operation: a policy step
    # became 2-4x slower after ~10 updates (`dynaweb bench train --stream`, before `04bc4a2`); threads
    # started later (torch's pool among them) inherit the setting from this one
    torch.set_flush_denormal(True)
    stop = stop or threading.Event()
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
    MetricsEndpoint(cfg, component, component_id, labels=labels)
    return stop
