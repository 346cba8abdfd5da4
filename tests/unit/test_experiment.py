"""Pure parts of the sample-efficiency experiment: statistics, headline, artifacts, version picks,
the collector's group schedule and on-policy pacing, the per-arm configs."""

import asyncio
import csv
import math

import pytest

from collectors.collector import _Pacer, _Schedule
from collectors.tasks import resolve_tasks
from infra.config import Config
from infra.experiment import QUICK, cell_config, experiment_id, pick_versions, resolve_experiment
from infra.experiment_report import (
    aggregate,
    headline,
    markdown,
    mean_ci,
    rows_from_cells,
    steps_to_reach,
    t975,
    write_all,
)


def test_t975_table_and_between_rows():
    assert t975(1) == pytest.approx(12.706)
    assert t975(2) == pytest.approx(4.303)
    assert t975(11) == t975(10)  # conservative: the smaller df's (larger) quantile
    assert t975(1000) == pytest.approx(1.96)
    with pytest.raises(ValueError):
        t975(0)


def test_mean_ci_hand_computed():
    m, lo, hi = mean_ci([0.2, 0.4, 0.6])
    # sd = 0.2, half width = 4.303 * 0.2 / sqrt(3)
    h = 4.303 * 0.2 / math.sqrt(3)
    assert m == pytest.approx(0.4)
    assert lo == pytest.approx(max(0.0, 0.4 - h))
    assert hi == pytest.approx(min(1.0, 0.4 + h))
    assert mean_ci([0.5]) == (0.5, None, None)
    m, lo, hi = mean_ci([0.9, 1.0])
    assert hi == 1.0 and lo >= 0.0  # clipped to [0, 1]


def test_steps_to_reach_interpolates_and_reports_never():
    curve = [{"real_steps": 100, "success": 0.1}, {"real_steps": 300, "success": 0.5}]
    assert steps_to_reach(curve, 0.3) == pytest.approx(200.0)
    assert steps_to_reach(curve, 0.05) == 100.0
    assert steps_to_reach(curve, 0.5) == 300.0
    assert steps_to_reach(curve, 0.6) is None


def _cell(arm, seed, pts):
    return {"arm": arm, "seed": seed, "points": [
        {"budget": b, "version": v, "real_steps": s, "success": y, "episodes": 10, "timeouts": 0}
        for b, v, s, y in pts]}  # fmt: skip


def _cells():
    cells = []
    for seed, (i0, r, d) in enumerate([(0.1, [0.2, 0.3, 0.4], [0.3, 0.4, 0.4]), (0.1, [0.2, 0.2, 0.4], [0.4, 0.4, 0.5])]):
        cells.append(_cell("imitation", seed, [(None, 5, 50, i0)]))
        cells.append(_cell("real_only", seed, [(100, 3, 100, r[0]), (200, 6, 200, r[1]), (300, 9, 300, r[2])]))
        cells.append(_cell("dynaweb", seed, [(100, 9, 100, d[0]), (200, 18, 200, d[1]), (300, 27, 300, d[2])]))
    return cells


def test_rows_start_arms_2_and_3_at_the_imitation_point():
    rows = rows_from_cells(_cells())
    ro = [r for r in rows if r["arm"] == "real_only" and r["seed"] == 0]
    assert [r["point"] for r in ro] == [0, 1, 2, 3]
    assert ro[0]["real_steps"] == 50 and ro[0]["success"] == 0.1
    assert len(rows) == 2 * (1 + 4 + 4)


def test_headline_ratio():
    agg = aggregate(rows_from_cells(_cells()))
    assert [p["real_steps"] for p in agg["real_only"]] == [50, 100, 200, 300]
    assert agg["dynaweb"][1]["success"] == pytest.approx(0.35)
    head = headline(agg)
    assert head["target"] == pytest.approx(0.4)
    assert head["arms"]["real_only"]["steps_to_target"] == pytest.approx(300.0)
    # dynaweb mean curve: 0.1@50, 0.35@100, 0.4@200 -> reaches 0.4 at 200
    assert head["arms"]["dynaweb"]["steps_to_target"] == pytest.approx(200.0)
    assert head["ratio"] == pytest.approx(200 / 300)
    assert head["arms"]["imitation"]["steps_to_target"] is None


def test_write_all_artifacts(tmp_path):
    meta = {"experiment_id": "seX", "command": "dynaweb experiment sample-efficiency", "wall_s": 60, "tasks": ["a"],
            "seeds": [0, 1], "eval_seeds_per_task": 3, "eval_seed_start": 1000}  # fmt: skip
    res = write_all(_cells(), tmp_path, meta)
    with open(tmp_path / "results.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == res["rows"] == 18
    assert set(rows[0]) >= {"arm", "seed", "real_steps", "success"}
    png = (tmp_path / "success_vs_real.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
    md = (tmp_path / "results.md").read_text()
    assert "| DynaWeb" in md and "0.67x" in md
    with pytest.raises(ValueError):
        write_all([], tmp_path, meta)


def test_markdown_says_when_dynaweb_does_not_reach():
    cells = _cells()
    for c in cells:
        if c["arm"] == "dynaweb":
            for p in c["points"]:
                p["success"] = 0.0
    agg = aggregate(rows_from_cells(cells))
    md = markdown(agg, headline(agg), {})
    assert "did not reach" in md and "not reached" in md


def test_ratio_undefined_when_real_only_does_not_improve():
    cells = [_cell("imitation", 0, [(None, 1, 50, 0.2)]), _cell("real_only", 0, [(100, 2, 100, 0.1), (200, 3, 200, 0.2)]),
             _cell("dynaweb", 0, [(100, 2, 100, 0.3), (200, 3, 200, 0.2)])]  # fmt: skip
    agg = aggregate(rows_from_cells(cells))
    head = headline(agg)
    assert head["ratio"] is None and not head["improved"]
    assert "undefined" in markdown(agg, head, {})


def test_pick_versions_never_exceeds_the_budget():
    hist = [(0, 50), (1, 50), (2, 70), (3, 95), (4, 120), (5, 150)]
    picks = pick_versions(hist, [100, 150, 200], demo_steps=50)
    assert [p["version"] for p in picks] == [3, 5, 5]
    assert all(p["real_steps"] <= p["budget"] for p in picks)
    assert pick_versions([(0, 50)], [10], 50)[0]["version"] == 0  # below the demos: the start


def test_cell_configs_differ_only_where_the_arms_do():
    cfg = Config()
    ex = resolve_experiment(cfg, quick=False)
    cells = {a: cell_config(cfg, ex, f"r-{a}", a, 1) for a in ("imitation", "real_only", "dynaweb")}
    for c in cells.values():  # same model, tokenizer, optimiser, seeds
        assert (c.model.layers, c.model.d_model, c.model.seed) == (ex.layers, ex.d_model, 1)
        assert c.trainer.lr == cfg.trainer.lr and c.collector.tasks == ex.tasks
        assert c.collector.seed_stop <= ex.eval_seed_start
    assert cells["imitation"].stream.expert_fraction == 1.0
    assert cells["real_only"].stream.expert_fraction == cells["dynaweb"].stream.expert_fraction == ex.expert_fraction
    assert cells["real_only"].collector.groups_per_version == 1.0
    assert cells["dynaweb"].collector.groups_per_version == ex.dream_real_share
    assert cells["real_only"].collector.seed_offset == cells["dynaweb"].collector.seed_offset
    assert not cells["real_only"].trainer.train_world_model and cells["dynaweb"].trainer.train_world_model
    assert not cells["real_only"].stream.expert_only_batches


def test_experiment_id_and_validation():
    cfg = Config()
    assert experiment_id(resolve_experiment(cfg, True)) != experiment_id(resolve_experiment(cfg, False))
    assert resolve_experiment(cfg, True).budget == QUICK["budget"]
    cfg.experiment.arms = ["real_only"]
    with pytest.raises(ValueError, match="imitation"):
        resolve_experiment(cfg, False)
    cfg.experiment.arms = ["imitation", "bogus"]
    with pytest.raises(ValueError, match="bogus"):
        resolve_experiment(cfg, False)


def test_group_schedule_hands_out_whole_groups_across_contexts():
    tasks = resolve_tasks(["miniwob/click-button", "miniwob/enter-text"])
    s = _Schedule(tasks, 0, 1000, offset=5, limit=0, run_length=8, group_size=3)
    jobs = [s.next(slot=i % 2) for i in range(9)]
    assert [(t.name, seed) for t, seed in jobs[:3]] == [("miniwob/click-button", 5)] * 3
    assert [(t.name, seed) for t, seed in jobs[3:6]] == [("miniwob/enter-text", 5)] * 3
    assert [(t.name, seed) for t, seed in jobs[6:9]] == [("miniwob/click-button", 6)] * 3
    assert s.starts_group()
    s.next()
    assert not s.starts_group()


class _Agent:
    def __init__(self):
        self.policy_version = 0
        self.refreshes = 0

    def refresh(self):
        self.refreshes += 1


def test_pacer_one_group_per_version():
    async def go():
        agent = _Agent()
        p = _Pacer(agent, 1.0, poll_s=0.01)
        stop = asyncio.Event()
        assert await p.turn(stop, lambda: True)  # first group at v0
        waiter = asyncio.ensure_future(p.turn(stop, lambda: True))
        await asyncio.sleep(0.05)
        assert not waiter.done() and agent.refreshes > 0  # second group waits for v1
        assert await p.turn(stop, lambda: False)  # ...but episodes of a started group never wait
        agent.policy_version = 1
        assert await asyncio.wait_for(waiter, 1)
        stop.set()
        assert not await p.turn(stop, lambda: True)

    asyncio.run(go())


def test_pacer_fractional_share():
    p = _Pacer(_Agent(), 0.25)
    assert [p.allowed(v) for v in range(9)] == [1, 1, 1, 1, 1, 1, 1, 2, 2]


def test_up_starts_the_gate_only_when_gating_is_on():
    from infra.up import component_argv

    cfg = Config()
    assert "gate" not in component_argv(cfg)
    cfg.gate.enabled = True
    assert component_argv(cfg)["gate"] == ["gate"]


def test_markdown_per_task_and_diagnostics_sections():
    from infra.experiment import _diag_by_arm, _per_task

    cells = _cells()
    for c in cells:
        c.update(train_s=10, eval_s=5, live_steps=100, history=[(0, 50)], diagnostics={"dream_success": 0.0})
        c["points"][-1]["per_task"] = {"miniwob/a": 0.5 if c["arm"] == "dynaweb" else 0.1}
    meta = {"per_task": _per_task(cells), "diagnostics": _diag_by_arm(cells)}
    assert meta["per_task"]["dynaweb"] == {"miniwob/a": 0.5}
    agg = aggregate(rows_from_cells(cells))
    md = markdown(agg, headline(agg), meta)
    assert "| dynaweb | 50.0% |" in md and "dream_success 0.0" in md
