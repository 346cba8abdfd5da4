"""The broker killed with SIGKILL while a producer publishes, restarted at once or after an outage.

The shared stack's broker (Tansu, its log in the stack's S3) is killed (-9, its whole process
group), restarted at once (``kill -9 and restart``) or left down for ``OUTAGE_S`` (``broker
unavailable``: 60 s by default in ``dynaweb chaos --outage``, 20 s by default in CI) and started again on the same port the way ``dynaweb infra
up`` starts it (``infra.stack.Stack.up(only=["broker"])``); the session's stack stops it at the
end as before.  Every record the publisher had acknowledged is read back, and records sent after
the restart are acknowledged within ``RECOVERY_S``."""

from __future__ import annotations

import time

import pytest

from core.config import Config
from infra.stack import Stack
from tests.faults.harness import OUTAGE_S, RECOVERY_S, Probe, acknowledged, publish_past, report

pytestmark = [pytest.mark.faults, pytest.mark.timeout(300)]


@pytest.mark.parametrize("outage_s", [0.0, OUTAGE_S], ids=["restart-at-once", "unavailable"])
def test_broker_kill_and_restart(run_cfg: Config, outage_s: float) -> None:
    probe = Probe(run_cfg).start()
    try:
        acknowledged(probe)
        Stack(run_cfg).kill("broker")  # -9 to its process group; returns once it is gone
        killed_at = time.time()
        try:
            time.sleep(outage_s)
        finally:  # the session's later tests need the broker whatever happens here
            Stack(run_cfg).up(only=["broker"])  # raises if it does not come up healthy
        probe.fault_ended()
        recovery = probe.wait_progress(RECOVERY_S)
        publish_past(probe)
    finally:
        probe.halt()
    counts = probe.stop()
    found = probe.check_nothing_lost(counts)
    report(
        "broker kill -9" if outage_s == 0 else "broker unavailable",
        outage_s=round(probe.fault_end[0] - killed_at, 1),
        recovery_s=round(recovery, 1),
        **counts,
        **found,
    )
