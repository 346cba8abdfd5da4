"""``dynaweb bench reload`` on the real stack: a dream generator and a ``latest``-policy collector
(real Chromium) run as supervised processes, the bench announces checkpoints, and each version's
first dreamed step, its group's publication and its first live episode are timed.  The 2 s target
is not asserted here (a shared 2-core machine is noisy); what is asserted could fail: both readers
take every version, a dream group starts before the round holding it is sent, no group mixes
versions, and the readers' own metric counted each reload."""

from __future__ import annotations

import dataclasses

import pytest

from evaluation.bench.reload import bench_reload
from tests.integration.conftest_collectors import require_chromium

pytestmark = pytest.mark.integration


def test_bench_reload_times_each_version_where_each_reader_starts_with_it(run_cfg) -> None:
    require_chromium()
    cfg = dataclasses.replace(
        run_cfg,
        model=dataclasses.replace(run_cfg.model, layers=1, d_model=64, heads=2),
        collector=dataclasses.replace(run_cfg.collector, tasks=["miniwob/click-button"]),
    )
    res = bench_reload(cfg, 2, 5.0, say=lambda _m: None)
    assert res["checkpoints"] == 2
    started, published = res["dream_s"], res["dream_published_s"]
    assert len(started) == len(published) == len(res["live_s"]) == 2
    # a round's records are sent when it ends: its first step was dreamed before that
    assert all(0.0 <= s <= p for s, p in zip(started, published, strict=True))
    assert sum(published) > sum(started)
    assert res["reload_p95_s"] is not None and res["dream_published_p95_s"] >= res["dream_p95_s"]
    assert res["groups"] > 0 and res["groups_mixing_beyond_max_staleness"] == 0, res[
        "groups_mixing_detail"
    ]
    own = res["readers_own_metric"]
    assert own["dream"]["count"] >= 2 and own["collector"]["count"] >= 2, own
