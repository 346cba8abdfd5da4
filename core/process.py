"""Start-up shared by the long-running model components (trainer, dream generator)."""

from __future__ import annotations

import ctypes
import functools
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


def trim_heap() -> None:
    """Hand the heap's free pages back to the OS (glibc ``malloc_trim``; nothing elsewhere).

    A step's peak (a batch of long real-application prompts, a backlog read after a broker
    outage) leaves its freed memory in the allocator's arenas: the process's resident size then
    stays at the peak for the rest of the run, a staircase that reads as growth (the trainer in
    an hour's soak with the shop: 2.4 -> 5.7 -> 4.4 GB, flat in between).  Called after each
    trainer step and dream round.  Its cost, on a 3 GB heap: 0.49 s handing back 1 GB held in
    2,500 scattered holes, 0.03 s with nothing to hand back."""
    try:
        _libc().malloc_trim(0)
    except (OSError, AttributeError):
        pass  # not glibc


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL("libc.so.6")
