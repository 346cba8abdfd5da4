"""The broker's S3 store stalled (SIGSTOP) for ``OUTAGE_S`` while a producer publishes.

The long stall that makes Tansu answer ``UnknownError`` and an idempotent producer fatal (45 s)
is reproduced by tests/integration/test_publish_outage.py; here the suite's shorter outage
checks the same promise: nothing acknowledged is lost, and records are acknowledged again
within ``RECOVERY_S`` of the thaw."""

from __future__ import annotations

import time

import pytest

from core.config import Config
from tests.faults.harness import (
    OUTAGE_S,
    RECOVERY_S,
    Probe,
    acknowledged,
    freeze,
    publish_past,
    report,
    service_pid,
    thaw,
)

pytestmark = [pytest.mark.faults, pytest.mark.timeout(300)]


def test_s3_store_stalled(run_cfg: Config) -> None:
    probe = Probe(run_cfg, idempotence=True).start()
    try:
        acknowledged(probe)
        pid = service_pid(run_cfg, "s3")
        freeze(pid)
        try:
            time.sleep(OUTAGE_S)
        finally:
            thaw(pid)
        probe.fault_ended()
        recovery = probe.wait_progress(RECOVERY_S)
        publish_past(probe)
    finally:
        probe.halt()
    counts = probe.stop()
    found = probe.check_nothing_lost(counts)
    report("s3 stalled", outage_s=OUTAGE_S, recovery_s=round(recovery, 1), **counts, **found)
