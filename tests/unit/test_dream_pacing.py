"""Dream pacing (models/dream/pacing.py), the trainer's consumption signal (models/train/consumed.py)
and the stale share of dreamed episodes (the mixer's count by source, `dynaweb up`'s summary, the
sample-efficiency diagnostics)."""

from __future__ import annotations

from types import SimpleNamespace

from core.config import Config
from evaluation.studies.sample_efficiency.diagnostics import diag_by_arm, dream_stale
from evaluation.studies.sample_efficiency.report import stale_share
from infra import up as up_mod
from models.dream.pacing import CreditWindow, auto_window_groups
from models.dream.run import pace_window
from models.train.consumed import DreamConsumption
from tests.factories import make_mixer
from tests.factories import mixer_trajectory as mk


def window(episodes: int = 16, staleness: int = 2, timeout_s: float = 60.0) -> CreditWindow:
    return CreditWindow(episodes, staleness, timeout_s)


def test_auto_window_is_the_dreams_consumed_while_a_version_surely_stays_fresh() -> None:
    # a version made just before a checkpoint is fresh for (2 - 1) x 5 + 1 = 6 steps of 8 online
    # trajectories, half of them dreams: 24 episodes -> 3 groups of 8
    assert auto_window_groups(2, 5, 16, 0.5, 0.5, 8) == 3
    assert auto_window_groups(2, 5, 16, 0.5, 1.0, 8) == 6  # dream-only training: all online ones
    assert auto_window_groups(0, 1, 2, 0.5, 0.5, 8) == 1  # never less than one group

    def pace(cfg: Config) -> CreditWindow | None:
        return pace_window(cfg.dream, cfg.stream, cfg.trainer.checkpoint_every)

    assert pace(Config()).window_episodes == 24
    off = Config()
    off.dream.pace = False
    assert pace(off) is None
    fixed = Config()
    fixed.dream.pace_window_groups = 3
    assert pace(fixed).window_episodes == 24


def test_a_full_window_waits_until_the_trainer_consumes() -> None:
    c = window(16)
    assert c.decide(0.0) == (True, "")
    assert c.groups_allowed(2, 8) == 2
    c.on_produced(0, 16, 0.0)
    ok, why = c.decide(1.0)
    assert not ok and "16 dreamed episodes in flight >= window 16" in why
    assert "no consumption message from the trainer yet" in why
    c.on_consumed(0, {"0": 8}, 1, 2.0)  # one group reached the loss
    assert c.in_flight() == 8 and c.decide(2.0) == (True, "")
    assert c.groups_allowed(2, 8) == 1  # the round dreams what the window has room for
    c.on_produced(0, 8, 3.0)
    ok, why = c.decide(4.0)
    assert not ok and "last consumption message 2s ago" in why


def test_episodes_older_than_the_staleness_floor_hold_no_credit() -> None:
    c = window(16, staleness=2)
    c.on_produced(3, 16, 0.0)
    assert not c.decide(1.0)[0]
    c.on_version(5, 2.0)  # floor 3: still fresh
    assert c.in_flight() == 16
    c.on_version(6, 3.0)  # floor 4: dropped wherever they wait, the credit comes back
    assert c.in_flight() == 0 and c.decide(3.0)[0]
    assert c.produced == {}  # older versions are forgotten


def test_a_restarted_trainer_counting_from_zero_takes_no_credit_back() -> None:
    c = window(16)
    c.on_produced(4, 16, 0.0)
    c.on_consumed(4, {"4": 16}, 1, 1.0)
    assert c.in_flight() == 0
    c.on_consumed(4, {"4": 3}, 1, 2.0)  # the new trainer's counts start again
    assert c.in_flight() == 0
    c.on_consumed(4, {}, 1, 3.0)
    assert c.in_flight() == 0


def test_nothing_settling_for_the_timeout_writes_the_window_off_once() -> None:
    c = window(16, timeout_s=60.0)
    c.on_produced(0, 16, 10.0)
    assert not c.decide(69.0)[0]  # waits: 59 s without settling
    assert c.decide(70.0) == (True, "")  # 60 s: written off, one more window
    assert c.written_off_total == 16 and c.in_flight() == 0
    c.on_produced(0, 16, 71.0)
    assert not c.decide(72.0)[0]  # and then it waits again: a bounded rate, never a spin
    # a late count of the written-off episodes does not make room beyond the window
    c.on_consumed(0, {"0": 16}, 1, 73.0)
    assert c.in_flight() == 0


def test_a_policy_already_below_the_floor_waits_for_its_reload_at_most_the_timeout() -> None:
    c = window(16, staleness=2, timeout_s=60.0)
    c.on_consumed(5, {}, 1, 0.0)  # the trainer is at v5: v3 is the oldest fresh version
    assert c.decide(0.0, version=3) == (True, "")
    ok, why = c.decide(1.0, version=2)
    assert not ok and "policy v2 is stale already (trainer at v5" in why
    assert not c.decide(60.0, version=2)[0]
    assert c.decide(61.0, version=2) == (True, "")  # the reload never came: one round goes
    assert not c.decide(62.0, version=2)[0]  # and the wait starts again


def test_several_producers_share_the_window() -> None:
    c = window(32)
    c.on_consumed(0, {}, 2, 0.0)
    assert c.limit() == 16
    c.on_produced(0, 16, 0.0)
    assert not c.decide(1.0)[0]
    c.on_consumed(0, {}, 1, 2.0)  # the other one stopped: its share comes back
    assert c.limit() == 32 and c.decide(2.0)[0]


def _traj(source: str, producer: str, version: int) -> SimpleNamespace:
    return SimpleNamespace(
        source=source, policy_version=version, transitions=[{"producer_id": producer}]
    )


def test_trainer_counts_dreams_by_producer_and_version_and_forgets_stale_versions() -> None:
    d = DreamConsumption()
    d.add([_traj("dream", "a@1", 3), _traj("dream", "a@1", 3), _traj("dream", "b@1", 1)])
    d.add([_traj("real", "collector", 3), _traj("expert", "x", 3), _traj("dream", "a@1", 4)])
    assert d.report(4, 2) == {"a@1": {"3": 2, "4": 1}}  # b's version 1 < floor 2: forgotten
    assert d.report(7, 2) == {} and d.counts == {}


def test_mixer_counts_stale_drops_by_source() -> None:
    m = make_mixer(max_staleness=1)
    m.set_latest_version(5)
    m.add_group([mk("dream", 1, "g1"), mk("dream", 1, "g1")], 0.0)
    m.add_group([mk("dream", 5, "g2")], 0.0)
    m.add_group([mk("real", 1, "g3")], 0.0)
    assert m.stale_by_source == {"dream": 2, "real": 1}
    m.set_latest_version(9)  # the queued dream group goes stale too
    assert m.stale_by_source["dream"] == 3 and m.drops["stale"] == 4


def test_up_summary_reports_the_stale_share_of_dreamed_episodes(monkeypatch) -> None:
    text = (
        "# TYPE dynaweb_dream_rollouts_total counter\n"
        'dynaweb_dream_rollouts_total{run="r1"} 200\n'
        "# TYPE dynaweb_stream_stale_dropped_dream_trajectories_total counter\n"
        'dynaweb_stream_stale_dropped_dream_trajectories_total{run="r1"} 10\n'
        "# TYPE dynaweb_trainer_stale_dropped_total counter\n"
        'dynaweb_trainer_stale_dropped_total{run="r1",source="dream"} 20\n'
        'dynaweb_trainer_stale_dropped_total{run="r1",source="real"} 7\n'
    )
    labels = {"component": "x", "component_id": "x-r1", "run": "r1", "pid": "1"}
    monkeypatch.setattr(up_mod, "scrape_targets", lambda cfg: [(labels, text)])
    s = up_mod.summarize(Config())
    assert (s["dream_episodes"], s["dream_stale_dropped"]) == (200, 30)
    assert s["dream_stale_share"] == 0.15
    assert "30 of 200 dreamed episodes (15%) dropped as stale" in up_mod.dream_line(s)


def test_diagnostics_stale_share_per_cell_and_pooled_per_arm() -> None:
    cell = {"dream_episodes": 100.0, "stream_dream_stale_dropped": 5.0}
    cell["gspo"] = {"dream": {"stale_dropped": 15.0}}
    assert dream_stale(cell) == {"dream_stale_dropped": 20.0, "dream_stale_share": 0.2}
    assert dream_stale({"dream_episodes": 0.0}) == {}
    base = {"train_s": 1.0, "eval_s": 1.0, "live_steps": 1.0, "history": []}
    cells = [
        {
            **base,
            "arm": "dynaweb",
            "diagnostics": {"dream_episodes": 100.0, "dream_stale_dropped": 20.0},
        },
        {
            **base,
            "arm": "dynaweb",
            "diagnostics": {"dream_episodes": 300.0, "dream_stale_dropped": 20.0},
        },
    ]
    assert diag_by_arm(cells)["dynaweb"]["dream_stale_share"] == 0.1


def test_stale_share_falls_back_to_the_dream_topic_when_the_dreamer_was_not_scraped() -> None:
    # the dreamer is stopped before a cell's final scrape: its episode counter is missing, the
    # dream topic's count stands in, and the stale drops come from the stream and the trainer
    cell = {"topic_dream_episodes": 600, "stream_dream_stale_dropped": 30.0}
    cell["gspo"] = {"dream": {"stale_dropped": 60.0}}
    assert dream_stale(cell) == {"dream_stale_dropped": 90.0, "dream_stale_share": 0.15}
    assert stale_share([cell]) == 0.15
    # the dreamer's own counter wins when it was scraped
    assert dream_stale({**cell, "dream_episodes": 900.0})["dream_stale_share"] == 0.1
    # no dreams at all: no share, not a zero
    assert stale_share([{"topic_dream_episodes": 0}]) is None
