"""The probe's independent read-back goes by the acknowledged offsets (``streams.offsets``), on the
real broker: every acknowledged record found, and the same records a read up to a sentinel
finds, within a bound."""

from __future__ import annotations

import time

import pytest

from core.waiting import wait_until
from infra.probe import Probe
from streams.kafka import read_until_sentinel

pytestmark = pytest.mark.integration


def test_the_read_back_by_offsets_finds_every_acknowledged_record(run_cfg) -> None:
    probe = Probe(run_cfg, rate=100.0).start()
    wait_until(lambda: probe.sent > 100, 30, "the probe sent 100 records", every=0.1)
    counts = probe.stop()
    assert counts["acked"] == counts["sent"] > 50 and counts["lost"] == 0
    ends = probe.ends()
    assert ends and sum(ends.values()) >= counts["acked"]  # offsets of every acknowledged record
    t0 = time.time()
    back = probe.read_back(timeout_s=120)
    took = time.time() - t0
    assert back["missing"] == [] and back["found"] == counts["sent"], back
    by_sentinel = sum(
        1 for _ in read_until_sentinel(run_cfg.kafka, probe.topic, run_cfg.run_id, 120)
    )
    assert by_sentinel == back["found"] + back["duplicates"]
    print(f"read back {back['found']} probe records by offsets in {took:.2f}s")
