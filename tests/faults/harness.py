"""What the fault-injection tests share: the probe publisher of ``dynaweb chaos``
(``infra.probe.Probe``: counts what the broker acknowledged, finds it again by id), the bounds,
and the stack's services."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

from core.config import Config
from infra.probe import Probe
from tests.support import wait_for

__all__ = [
    "OUTAGE_S",
    "RECOVERY_S",
    "Probe",
    "acknowledged",
    "freeze",
    "publish_past",
    "report",
    "service_pid",
    "thaw",
]

RECOVERY_S = 60.0  # the loop makes progress again within this of the fault ending
OUTAGE_S = float(os.environ.get("DYNAWEB_TEST_FAULT_S", "20"))  # how long a fault lasts


def service_pid(cfg: Config, name: str) -> int:
    """The pid (and process group) of one of the stack's services (infra.stack's pid file)."""
    return int(json.loads((Path(cfg.home) / "pids" / f"{name}.json").read_text())["pid"])


def report(name: str, **facts: object) -> None:
    """One line for the suite's table (pytest -s, or the captured output of a failure)."""
    print(f"FAULT {name}: " + ", ".join(f"{k}={v}" for k, v in facts.items()))  # noqa: T201


def acknowledged(probe: Probe, timeout: float = 30.0) -> None:
    """A healthy start: the probe's first record acknowledged."""
    wait_for(lambda: probe.pub.acked > 0, timeout, "the probe's first acknowledgement")


def publish_past(probe: Probe, n: int = 40) -> None:
    """Keep publishing after the recovery until ``n`` more records are acknowledged."""
    start = probe.pub.acked
    wait_for(lambda: probe.pub.acked >= start + n, RECOVERY_S, f"{n} acknowledgements after it")


def freeze(pid: int) -> None:
    os.killpg(pid, signal.SIGSTOP)


def thaw(pid: int) -> None:
    os.killpg(pid, signal.SIGCONT)
