"""Pure parts of the sample-efficiency experiment: statistics, headline, artifacts, version picks,
the collector's group schedule and on-policy pacing, the per-arm configs (the matched imitation
control among them), the trainer-metrics diagnostics and the JSON summary."""

import asyncio
import csv
import dataclasses
import json
import math

import pytest

from collectors.schedule import _Pacer, _Schedule
from collectors.tasks import resolve_tasks
from core.config import Config
from evaluation.studies.sample_efficiency.arm_names import ARMS
from evaluation.studies.sample_efficiency.arms import (
    QUICK,
    cell_config,
    cell_settings,
    experiment_id,
    expert_samples_per_step,
    matched_points,
    online_points,
    pick_versions,
    resolve_experiment,
)
from evaluation.studies.sample_efficiency.artifacts import markdown, write_all
from evaluation.studies.sample_efficiency.config import SampleEfficiencyConfig
from evaluation.studies.sample_efficiency.diagnostics import parse_scrape
from evaluation.studies.sample_efficiency.report import (
    aggregate,
    arm_summary,
    headline,
    mean_ci,
    nonzero_adv_share,
    rows_from_cells,
    steps_to_reach,
    t975,
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
    # the same successes, means apart by the cells' 4-decimal rounding: reached, at that point
    tie = [{"real_steps": 100, "success": 0.35}, {"real_steps": 500, "success": 0.397222}]
    assert steps_to_reach(tie, 0.3972223333) == 500.0
    assert steps_to_reach(tie, 0.3975) is None  # 0.0003 apart: more than rounding


def _cell(arm, seed, pts):
    return {
        "arm": arm,
        "seed": seed,
        "points": [
            {
                "budget": b,
                "version": v,
                "real_steps": s,
                "success": y,
                "episodes": 10,
                "timeouts": 0,
            }
            for b, v, s, y in pts
        ],
    }


def _cells():
    cells = []
    for seed, (i0, r, d) in enumerate(
        [(0.1, [0.2, 0.3, 0.4], [0.3, 0.4, 0.4]), (0.1, [0.2, 0.2, 0.4], [0.4, 0.4, 0.5])]
    ):
        cells.append(_cell("imitation", seed, [(None, 5, 50, i0)]))
        cells.append(
            _cell(
                "real_only", seed, [(100, 3, 100, r[0]), (200, 6, 200, r[1]), (300, 9, 300, r[2])]
            )
        )
        cells.append(
            _cell(
                "dynaweb", seed, [(100, 9, 100, d[0]), (200, 18, 200, d[1]), (300, 27, 300, d[2])]
            )
        )
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
    meta = {
        "experiment_id": "seX",
        "command": "dynaweb experiment sample-efficiency",
        "wall_s": 60,
        "tasks": ["a"],
        "seeds": [0, 1],
        "eval_seeds_per_task": 3,
        "eval_seed_start": 1000,
    }
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
    cells = [
        _cell("imitation", 0, [(None, 1, 50, 0.2)]),
        _cell("real_only", 0, [(100, 2, 100, 0.1), (200, 3, 200, 0.2)]),
        _cell("dynaweb", 0, [(100, 2, 100, 0.3), (200, 3, 200, 0.2)]),
    ]
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
    cfg = SampleEfficiencyConfig()
    ex = resolve_experiment(cfg, quick=False)
    cells = {a: cell_config(cfg, ex, f"r-{a}", a, 1, init_from="imit:1") for a in ARMS}
    for c in cells.values():  # same model, tokenizer, optimiser, seeds, sampling temperature
        assert (c.model.layers, c.model.d_model, c.model.seed) == (ex.layers, ex.d_model, 1)
        assert c.trainer.lr == cfg.trainer.lr and c.collector.tasks == ex.tasks
        assert c.collector.seed_stop <= ex.eval_seed_start
        assert c.dream.temperature == c.trainer.policy_temperature == ex.temperature
    assert cells["imitation"].trainer.init_from == ""
    assert cells["imitation"].stream.expert_fraction == 1.0
    assert (
        cells["real_only"].stream.expert_fraction
        == cells["dynaweb"].stream.expert_fraction
        == ex.expert_fraction
    )
    assert cells["real_only"].collector.groups_per_version == 1.0
    assert cells["dynaweb"].collector.groups_per_version == ex.dream_real_share
    assert cells["real_only"].collector.seed_offset == cells["dynaweb"].collector.seed_offset
    assert (
        not cells["real_only"].trainer.train_world_model
        and cells["dynaweb"].trainer.train_world_model
    )
    assert not cells["real_only"].stream.expert_only_batches
    # the paper's setting: the same collector and world model as dynaweb, no real group trained on
    do, dy = cells["dynaweb_dream_only"], cells["dynaweb"]
    assert do.stream.policy_sources == ["dream"] and dy.stream.policy_sources == ["real", "dream"]
    assert do.trainer.train_world_model and do.collector.groups_per_version == ex.dream_real_share
    assert (do.collector.policy, do.collector.seed_offset) == (
        dy.collector.policy,
        dy.collector.seed_offset,
    )
    from evaluation.studies.sample_efficiency.cell import cell_components

    assert "dream" in cell_components("dynaweb_dream_only", "r", 1)
    assert "collector" in cell_components("dynaweb_dream_only", "r", 1)
    assert "dream" not in cell_components("real_only", "r", 1)


def test_experiment_id_and_validation():
    cfg = SampleEfficiencyConfig()
    assert experiment_id(resolve_experiment(cfg, True)) != experiment_id(
        resolve_experiment(cfg, False)
    )
    assert resolve_experiment(cfg, True).budget == QUICK["budget"]
    cfg.experiment.arms = ["real_only"]
    with pytest.raises(ValueError, match="imitation"):
        resolve_experiment(cfg, False)
    cfg.experiment.arms = ["imitation", "bogus"]
    with pytest.raises(ValueError, match="bogus"):
        resolve_experiment(cfg, False)


def test_bc_temperature_decouples_what_imitation_fits_from_what_is_sampled():
    cfg = SampleEfficiencyConfig()
    ex = resolve_experiment(cfg, False)
    for arm in ("imitation", "real_only"):
        c = cell_config(cfg, ex, f"r-{arm}", arm, 0, init_from="imit:1")
        assert c.trainer.policy_temperature == c.dream.temperature == ex.temperature
    cfg.experiment.temperature, cfg.experiment.bc_temperature = 2.0, 1.0
    ex2 = resolve_experiment(cfg, False)
    assert experiment_id(ex2) != experiment_id(ex)
    for arm in ("imitation", "imitation_matched", "real_only"):
        c = cell_config(cfg, ex2, f"r-{arm}", arm, 0, init_from="imit:1")
        assert (c.trainer.policy_temperature, c.dream.temperature) == (1.0, 2.0)
    cfg.experiment.bc_temperature = -1.0
    with pytest.raises(ValueError, match="bc_temperature"):
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
    from evaluation.studies.sample_efficiency.diagnostics import diag_by_arm as _diag_by_arm
    from evaluation.studies.sample_efficiency.diagnostics import per_task as _per_task

    cells = _cells()
    for c in cells:
        c.update(
            train_s=10,
            eval_s=5,
            live_steps=100,
            history=[(0, 50)],
            diagnostics={"topic_dream_success": 0.0},
        )
        c["points"][-1]["per_task"] = {"miniwob/a": 0.5 if c["arm"] == "dynaweb" else 0.1}
    meta = {"per_task": _per_task(cells), "diagnostics": _diag_by_arm(cells)}
    assert meta["per_task"]["dynaweb"] == {"miniwob/a": 0.5}
    agg = aggregate(rows_from_cells(cells))
    md = markdown(agg, headline(agg), meta)
    assert "| dynaweb | 50.0% | 50.0% |" in md and "topic_dream_success 0.0" in md
    for c in cells:  # click-link apart: first, and out of the others' mean
        c["points"][-1]["per_task"] = {
            "miniwob/click-link": 0.9,
            "miniwob/a": 0.2,
            "miniwob/b": 0.4,
        }
    meta = {"per_task": _per_task(cells), "apart_tasks": ["miniwob/click-link"]}
    md = markdown(agg, headline(agg), meta)
    assert "| arm | click-link | a | b | mean of the others |" in md
    assert "| dynaweb | 90.0% | 20.0% | 40.0% | 30.0% |" in md


# --- the matched imitation control -----------------------------------------------------------------


def _mixer_for(c):
    """The stream worker's mixer as ``streams/state.py`` builds it from a cell's config."""
    from streams.mixer import HybridMixer

    s = c.stream
    return HybridMixer(
        run_id=c.run_id,
        worker_id="w",
        expert_fraction=s.expert_fraction,
        batch_trajectories=s.batch_trajectories,
        max_staleness=s.max_staleness,
        samples_per_insert=s.samples_per_insert,
        expert_pool_size=s.expert_pool_size,
        cold_start_batch_s=s.cold_start_batch_s,
        reuse_wait_s=s.reuse_wait_s,
        batch_wait_s=s.batch_wait_s or None,
    )


def _traj(source, i, group=""):
    from streams.records import Trajectory, Transition

    obs = {"instruction": "click", "tree": "page"}
    t = Transition(
        run_id="r",
        episode_id=f"{source}-{group}-{i}",
        step=0,
        task="t",
        seed=i,
        source=source,
        policy_version=0,
        world_model_version=0,
        obs=obs,
        action="stop",
        next_obs=obs,
        reward=1.0,
        done=True,
        group_id=group,
    )
    return Trajectory.from_transitions([t])


def _experts_per_batch(c, groups: int) -> list[int]:
    m = _mixer_for(c)
    for i in range(50):
        m.add_expert(_traj("expert", i))
    for g in range(groups):
        m.add_group([_traj("real", i, f"g{g}") for i in range(c.stream.group_size)], now=0.0)
    out = []
    allow = (
        c.stream.expert_only_batches
    )  # as the stream worker polls it (online arms: never expert-only)
    for b in m.poll(100.0, allow_expert_only=allow) + m.poll(200.0, allow_expert_only=allow):
        out.append(sum(t.source == "expert" for t in b.trajs()))
    return out


@pytest.mark.parametrize("quick", [False, True])
def test_imitation_matched_has_the_online_arms_steps_init_and_expert_samples(quick):
    cfg = SampleEfficiencyConfig()
    ex = resolve_experiment(cfg, quick=quick)
    cells = {a: cell_config(cfg, ex, f"r-{a}", a, 0, init_from="seX-imitation-s0:1") for a in ARMS}
    m = cells["imitation_matched"]
    for arm in ("real_only", "dynaweb"):
        o = cells[arm]
        assert (
            m.trainer.init_from == o.trainer.init_from == "seX-imitation-s0:1"
        )  # same initialisation
        assert (
            m.trainer.max_steps == o.trainer.max_steps == ex.online_policy_steps
        )  # same optimizer steps
        assert (
            m.trainer.checkpoint_every == o.trainer.checkpoint_every == 1
        )  # same read-out granularity
        assert m.trainer == dataclasses.replace(
            o.trainer, train_world_model=False
        )  # same lr, clip, schedule
    assert cells["imitation"].trainer.max_steps == ex.imitation_steps
    # expert-only batches of exactly the online arms' demonstration samples per step
    assert m.stream.expert_fraction == 1.0 and m.stream.expert_only_batches
    assert m.stream.batch_trajectories == expert_samples_per_step(ex)
    assert m.collector.policy != "latest"  # no collector: it never interacts
    if not quick:
        assert expert_samples_per_step(ex) == ex.batch_trajectories * ex.expert_fraction == 8
    # ...as the real mixer builds them: one batch per online group, each with that many experts
    online = _experts_per_batch(cells["real_only"], groups=3)
    assert online == [expert_samples_per_step(ex)] * 3
    matched = _experts_per_batch(m, groups=0)
    assert matched and set(matched) == {expert_samples_per_step(ex)}


def test_frozen_defaults_and_quick_keeps_scaled_down_values():
    ex = resolve_experiment(SampleEfficiencyConfig(), quick=False)
    assert ex.arms == [
        "imitation",
        "imitation_matched",
        "real_only",
        "dynaweb",
        "dynaweb_dream_only",
    ]
    assert ex.group_size == 8 and ex.temperature == 1.0 and ex.online_policy_steps == 20
    assert ex.tasks == [
        "miniwob/click-link",
        "miniwob/click-checkboxes",
        "miniwob/click-button",
        "miniwob/click-tab",
    ]
    q = resolve_experiment(SampleEfficiencyConfig(), quick=True)
    assert (
        q.arms == ex.arms
        and q.online_policy_steps < ex.online_policy_steps
        and q.group_size < ex.group_size
    )
    cfg = SampleEfficiencyConfig()
    cfg.experiment.expert_fraction = 1.0
    with pytest.raises(ValueError, match="expert_fraction"):
        resolve_experiment(cfg, False)


def test_online_points_end_at_the_final_version():
    hist = [(0, 50), (1, 50), (2, 70), (3, 95), (4, 120), (5, 160)]
    pts = online_points(hist, [100, 150], demo_steps=50)
    assert [(p["budget"], p["version"], p["policy_steps"]) for p in pts] == [
        (100, 3, 3),
        (150, 4, 4),
        (None, 5, 5),
    ]
    assert (
        pts[-1]["real_steps"] == 160
    )  # the final point reports what it used, past the last budget point


def test_matched_points_follow_the_online_arms_policy_steps():
    ro = [{"policy_steps": 3}, {"policy_steps": 6}, {"policy_steps": 20}]
    dyn = [{"policy_steps": 12}, {"policy_steps": 20}, {"policy_steps": 20}]
    pts = matched_points([ro, dyn], [100, 200], steps=20, demo_steps=40)
    assert [p["policy_steps"] for p in pts] == [
        12,
        20,
        20,
    ]  # the most BC updates any online arm had
    assert [p["version"] for p in pts] == [12, 20, 20]  # one checkpoint per step
    assert [p["budget"] for p in pts] == [100, 200, None]
    assert all(p["real_steps"] == 40 for p in pts)  # demonstrations only
    alone = matched_points([], [100, 200, 300], steps=20, demo_steps=40)
    assert [p["policy_steps"] for p in alone] == [5, 10, 15, 20]


# --- trainer metrics: the nonzero-advantage share per source -------------------------------------

TRAINER_TEXT = """# HELP dynaweb_trainer_steps_total Optimizer steps.
# TYPE dynaweb_trainer_steps_total counter
dynaweb_trainer_steps_total{model="policy",run="r1"} 20.0
dynaweb_trainer_steps_total{model="world_model",run="r1"} 40.0
# TYPE dynaweb_trainer_samples_total counter
dynaweb_trainer_samples_total{model="policy",run="r1",source="expert"} 160.0
dynaweb_trainer_samples_total{model="policy",run="r1",source="real"} 40.0
dynaweb_trainer_samples_total{model="policy",run="r1",source="dream"} 120.0
dynaweb_trainer_samples_total{model="world_model",run="r1",source="real"} 300.0
# TYPE dynaweb_trainer_gspo_groups_total counter
dynaweb_trainer_gspo_groups_total{run="r1",source="real"} 5.0
dynaweb_trainer_gspo_groups_total{run="r1",source="dream"} 15.0
# TYPE dynaweb_trainer_gspo_groups_created gauge
dynaweb_trainer_gspo_groups_created{run="r1",source="real"} 1.7e+09
# TYPE dynaweb_trainer_gspo_groups_nonzero_total counter
dynaweb_trainer_gspo_groups_nonzero_total{run="r1",source="real"} 2.0
dynaweb_trainer_gspo_groups_nonzero_total{run="r1",source="dream"} 0.0
# TYPE dynaweb_trainer_gspo_advantage_abs_sum_total counter
dynaweb_trainer_gspo_advantage_abs_sum_total{run="r1",source="real"} 12.5
# TYPE dynaweb_trainer_stale_dropped_total counter
dynaweb_trainer_stale_dropped_total{run="r1",source="dream"} 7.0
# TYPE dynaweb_trainer_nonzero_advantage_share gauge
dynaweb_trainer_nonzero_advantage_share{run="r1"} 0.1
# TYPE dynaweb_trainer_task_trust gauge
dynaweb_trainer_task_trust{measure="balanced_accuracy",run="r1",task="miniwob/click-tab"} 0.55
dynaweb_trainer_task_trust{measure="gated",run="r1",task="miniwob/click-tab"} 0.0
"""
OTHER_TEXT = """# TYPE dynaweb_dream_steps_total counter
dynaweb_dream_steps_total{run="r1"} 640.0
# TYPE dynaweb_trainer_gspo_groups_total counter
dynaweb_trainer_gspo_groups_total{run="r1",source="real"} 99.0
"""


def test_nonzero_adv_share_from_the_trainers_scrape():
    d = parse_scrape(
        [({"component": "trainer"}, TRAINER_TEXT), ({"component": "dream"}, OTHER_TEXT)]
    )
    assert d["trainer_policy_steps"] == 20 and d["trainer_world_model_steps"] == 40
    assert d["trainer_samples_expert"] == 160 and d["trainer_samples_dream"] == 120
    assert d["dream_steps"] == 640 and d["nonzero_advantage_share_last"] == 0.1
    g = d["gspo"]  # only the trainer's series: the 99 groups of another component are not counted
    assert g["real"] == {"groups": 5.0, "groups_nonzero": 2.0, "adv_abs_sum": 12.5}
    assert g["dream"] == {"groups": 15.0, "groups_nonzero": 0.0, "stale_dropped": 7.0}
    assert nonzero_adv_share(g) == {"live": 0.4, "dream": 0.0}
    assert d["task_trust"] == {"miniwob/click-tab": {"balanced_accuracy": 0.55, "gated": 0.0}}
    assert nonzero_adv_share({}) == {"live": None, "dream": None}  # no group reached the loss
    assert nonzero_adv_share({"dream": {"stale_dropped": 3.0}}) == {"live": None, "dream": None}


def test_parse_scrape_reads_prometheus_client_output():
    from prometheus_client import CollectorRegistry, Counter, generate_latest

    reg = CollectorRegistry()
    groups = Counter("dynaweb_trainer_gspo_groups_total", "g", ["run", "source"], registry=reg)
    nonzero = Counter(
        "dynaweb_trainer_gspo_groups_nonzero_total", "n", ["run", "source"], registry=reg
    )
    adv = Counter("dynaweb_trainer_gspo_advantage_abs_sum", "a", ["run", "source"], registry=reg)
    groups.labels("r", "real").inc(4)
    nonzero.labels("r", "real").inc(3)
    adv.labels("r", "real").inc(2.5)
    samples = Counter("dynaweb_trainer_samples", "s", ["run", "model", "source"], registry=reg)
    samples.labels("r", "policy", "expert").inc(7)
    samples.labels("r", "world_model", "real").inc(5)
    samples.labels("r", "world_model", "expert").inc(2)
    parsed = parse_scrape([({"component": "trainer"}, generate_latest(reg).decode())])
    g = parsed["gspo"]
    assert g == {"real": {"groups": 4.0, "groups_nonzero": 3.0, "adv_abs_sum": 2.5}}
    assert nonzero_adv_share(g) == {"live": 0.75, "dream": None}
    assert parsed["trainer_samples_expert"] == 7.0
    assert (parsed["trainer_wm_samples_real"], parsed["trainer_wm_samples_expert"]) == (5.0, 2.0)


def test_parse_scrape_reads_every_counter_the_trainer_declares():
    """Against the declarations in models/metrics.py (exposed as the trainer exposes them), so a renamed
    counter fails here instead of silently missing from the study's diagnostics."""
    from prometheus_client import REGISTRY, generate_latest

    import models.metrics as M

    declared = {
        "trajectories": M.GSPO_TRAJ,
        "groups": M.GSPO_GROUPS,
        "groups_nonzero": M.GSPO_GROUPS_NONZERO,
        "adv_abs_sum": M.GSPO_ADV_ABS,
        "clipped": M.GSPO_CLIPPED,
        "ratio_sum": M.GSPO_RATIO_SUM,
        "stale_dropped": M.TRAINER_STALE,
        "ungrouped": M.TRAINER_UNGROUPED,
    }
    for c in declared.values():
        c.labels("unit-parse-scrape", "dream").inc(0)
    g = parse_scrape([({"component": "trainer"}, generate_latest(REGISTRY).decode())])["gspo"]
    assert set(declared) <= set(g["dream"]), g


# --- the JSON summary -------------------------------------------------------------------------------


def _study_cells():
    """Two seeds of all five arms, as ``run_cell`` writes them."""
    cells = []
    for seed, (r, d, m) in enumerate(
        [([0.2, 0.3, 0.4], [0.3, 0.4, 0.5], 0.3), ([0.2, 0.2, 0.2], [0.4, 0.4, 0.4], 0.2)]
    ):
        imit = _cell("imitation", seed, [(None, 1, 50, 0.1)])
        imit["points"][0]["policy_steps"] = 60
        cells.append(imit)
        for arm, ys, gspo in (
            ("real_only", r, {"real": {"groups": 4.0, "groups_nonzero": 1.0}}),
            (
                "dynaweb",
                d,
                {
                    "real": {"groups": 1.0, "groups_nonzero": 1.0},
                    "dream": {"groups": 3.0, "groups_nonzero": 0.0},
                },
            ),
            ("dynaweb_dream_only", d, {"dream": {"groups": 4.0, "groups_nonzero": 2.0}}),
        ):
            c = _cell(
                arm, seed, [(100, 3, 100, ys[0]), (200, 6, 200, ys[1]), (None, 20, 260, ys[2])]
            )
            for p in c["points"]:
                p["policy_steps"] = p["version"]
            c["diagnostics"] = {
                "gspo": gspo,
                "trainer_policy_steps": 20.0,
                "trainer_samples_expert": 160.0,
                "trainer_wm_samples_expert": 100.0 + seed,
                "trainer_wm_samples_real": 50.0,
            }
            if arm != "real_only":
                c["diagnostics"].update(topic_dream_steps=400, topic_dream_wm_ok=400 - 100 * seed)
                c["wm_fidelity"] = {
                    "dynaweb_final": {
                        "reward_bal_acc": 0.8 + 0.1 * seed,
                        "exact_match": 0.6,
                        "baseline_exact_match": 0.5,
                    }
                }
                c["replay"] = {"dream_reward_auroc": 0.7} if seed == 0 else {}
            cells.append(c)
        mc = _cell(
            "imitation_matched", seed, [(100, 6, 50, m), (200, 20, 50, m), (None, 20, 50, m)]
        )
        for p in mc["points"]:
            p["policy_steps"] = p["version"]
        mc["diagnostics"] = {"trainer_policy_steps": 20.0, "trainer_samples_expert": 160.0}
        mc["expert_samples_per_step"] = 8
        cells.append(mc)
    return cells


def test_arm_summary_shape_and_values():
    arms = arm_summary(_study_cells())
    assert list(arms) == [
        "imitation",
        "imitation_matched",
        "real_only",
        "dynaweb",
        "dynaweb_dream_only",
    ]
    for a in arms.values():
        assert {"final_success", "ci95", "real_steps", "policy_steps", "nonzero_adv_share"} <= set(
            a
        )
        assert len(a["ci95"]) == 2 and set(a["nonzero_adv_share"]) == {"live", "dream"}
    ro = arms["real_only"]
    h = 12.706 * math.sqrt(((0.4 - 0.3) ** 2 + (0.2 - 0.3) ** 2) / 1) / math.sqrt(2)
    assert ro["final_success"] == pytest.approx(0.3)
    assert ro["ci95"] == [
        pytest.approx(max(0.0, 0.3 - h), abs=1e-4),
        pytest.approx(min(1.0, 0.3 + h), abs=1e-4),
    ]
    assert ro["real_steps"] == 260 and ro["policy_steps"] == 20
    assert ro["nonzero_adv_share"] == {
        "live": 0.25,
        "dream": None,
    }  # pooled over seeds: 2 of 8 groups
    assert arms["dynaweb"]["nonzero_adv_share"] == {"live": 1.0, "dream": 0.0}
    m = arms["imitation_matched"]
    assert (
        m["policy_steps"] == 20
        and m["real_steps"] == 50
        and m["final_success"] == pytest.approx(0.25)
    )
    assert m["nonzero_adv_share"] == {"live": None, "dream": None}  # behaviour cloning only
    assert m["expert_samples_per_step"] == 8 and m["expert_samples_per_step_trained"] == 8.0
    imit = arms["imitation"]
    assert imit["policy_steps"] == 60 and imit["ci95"] == [0.1, 0.1]
    # what the world model and the dreams were (the summary's world-model and dream keys)
    for arm in ("dynaweb", "dynaweb_dream_only"):
        a = arms[arm]
        assert a["world_model_steps_real"] == 150.5 and a["dream_steps"] == 400.0
        assert a["wm_reward_bal_acc"] == pytest.approx(0.85) and a["wm_exact_match"] == 0.6
        assert a["wm_exact_match_baseline"] == 0.5
        assert a["dream_apply_rate"] == pytest.approx(1 - 100 / 800)  # pooled over seeds
        assert a["dream_reward_auroc"] == 0.7  # the one seed that measured it
    assert arms["dynaweb_dream_only"]["nonzero_adv_share"] == {"live": None, "dream": 0.5}
    assert arms["dynaweb"]["dream_stale_share"] is None  # these cells counted no dream episodes
    cells = _study_cells()
    for c in cells:  # seed 0: 30 of 100 dreamed episodes stale, seed 1: 10 of 300
        if c["arm"] == "dynaweb":
            c.setdefault("diagnostics", {}).update(
                dream_episodes=100.0 if c["seed"] == 0 else 300.0,
                dream_stale_dropped=30.0 if c["seed"] == 0 else 10.0,
            )
    assert arm_summary(cells)["dynaweb"]["dream_stale_share"] == 0.1  # pooled: 40 of 400
    assert ro["dream_steps"] == 0.0 and "wm_reward_bal_acc" not in ro
    assert arms["imitation_matched"]["world_model_steps_real"] is None  # not scraped
    one = arm_summary([c for c in _study_cells() if c["seed"] == 0])
    assert one["dynaweb"]["ci95"] == [None, None]  # one seed: no interval
    json.dumps(arms)  # plain JSON


def test_write_all_with_five_arms(tmp_path):
    cells = _study_cells()
    res = write_all(
        cells,
        tmp_path,
        {
            "experiment_id": "seX",
            "frozen": {
                "group_size": 8,
                "temperature": 1.0,
                "reward": "binary",
                "online_policy_steps": 20,
                "expert_samples_per_step": 8,
            },
        },
    )
    assert set(res["arms"]) == set(ARMS)
    with open(tmp_path / "results.csv") as fh:
        rows = list(csv.DictReader(fh))
    matched = [r for r in rows if r["arm"] == "imitation_matched" and r["seed"] == "0"]
    assert [r["policy_steps"] for r in matched] == [
        "0",
        "6",
        "20",
        "20",
    ]  # starts at the imitation point
    md = (tmp_path / "results.md").read_text()
    assert "Imitation, matched updates" in md and "Matched control" in md and "G = 8" in md
    assert "| 25.0% / - |" in md  # real-only: live share, no dream groups


def test_paired_differences_per_seed_with_a_t_interval():
    from evaluation.studies.sample_efficiency.report import paired_differences

    rows = []
    for seed, (ro, im) in enumerate([(0.5, 0.3), (0.4, 0.3), (0.6, 0.3)]):
        rows += [
            {"arm": "real_only", "seed": seed, "success": 0.0},
            {"arm": "real_only", "seed": seed, "success": ro},
            {"arm": "imitation_matched", "seed": seed, "success": im},
        ]
    rows.append({"arm": "dynaweb", "seed": 0, "success": 0.1})  # one seed only: no interval
    p = paired_differences(rows)
    d = p["real_only - imitation_matched"]
    assert d["per_seed"] == {0: 0.2, 1: 0.1, 2: 0.3} and abs(d["mean"] - 0.2) < 1e-9
    assert (
        d["ci95"][0] < 0.2 < d["ci95"][1]
        and abs((d["ci95"][1] - 0.2) - 4.303 * 0.1 / 3**0.5) < 1e-3
    )
    assert p["dynaweb - imitation_matched"] == {
        "mean": -0.2,
        "ci95": [None, None],
        "per_seed": {0: -0.2},
    }
    assert "dynaweb - real_only" in p


def test_a_study_extended_by_seeds_or_arms_keeps_its_id_and_its_cells(tmp_path):
    """Seeds and arms say which cells run, not how: more seeds keep the experiment id, so an out
    dir's finished cells are kept; an out dir written under an id that still hashed them is taken
    when every other setting agrees, and refused when one differs."""
    import dataclasses
    import json

    from evaluation.studies.sample_efficiency.study import SampleEfficiency
    from tests.factories import git_checkout

    repo = git_checkout(tmp_path / "repo")  # a full study runs from a checkout with a statement
    cfg = SampleEfficiencyConfig()
    cfg.experiment.statement = "docs/statement.md"
    ex = resolve_experiment(cfg, False)
    cfg.experiment.seeds = [0, 1, 2, 3, 4]
    cfg.experiment.arms = ["imitation", "imitation_matched", "real_only"]
    assert experiment_id(resolve_experiment(cfg, False)) == experiment_id(ex)
    out = tmp_path / "se"
    out.mkdir()
    old = {"experiment_id": "seOLD", "quick": False, "config": dataclasses.asdict(ex),
           "wall_s_total": 100.0}  # fmt: skip
    (out / "experiment.json").write_text(json.dumps(old))
    se = SampleEfficiency(cfg, out, start_stack=False, echo=False)
    se.repo = repo
    se._check_out()
    meta = json.loads((out / "experiment.json").read_text())
    assert meta["experiment_id"] == se.id and meta["former_experiment_id"] == "seOLD"
    assert meta["config"]["seeds"] == [0, 1, 2, 3, 4] and meta["wall_s_total"] == 100.0
    cfg.experiment.online_policy_steps = 40  # a cell setting: another experiment
    se = SampleEfficiency(cfg, out, start_stack=False, echo=False)
    se.repo = repo
    with pytest.raises(ValueError, match="another configuration"):
        se._check_out()


def test_two_live_groups_per_step_keep_the_matched_expert_samples():
    """batch 24 at an expert share of 1/3: real_only collects two groups per policy step, the mixer
    waits for both (a lone group is not trained on with half the experts), and every arm still
    gets 8 demonstrations per step."""
    from evaluation.studies.sample_efficiency.arms import live_groups_per_step

    cfg = SampleEfficiencyConfig()
    ex = resolve_experiment(cfg, quick=False)
    assert live_groups_per_step(ex) == 1  # the frozen study: one group per step, as before
    base_cells = {a: cell_config(cfg, ex, f"r-{a}", a, 0, init_from="i:1") for a in ARMS}
    assert base_cells["real_only"].stream.batch_wait_s == 0.0  # unchanged
    ex2 = dataclasses.replace(ex, batch_trajectories=24, expert_fraction=1 / 3)
    assert live_groups_per_step(ex2) == 2 and expert_samples_per_step(ex2) == 8
    cells = {a: cell_config(cfg, ex2, f"r-{a}", a, 0, init_from="i:1") for a in ARMS}
    ro = cells["real_only"]
    assert ro.collector.groups_per_version == 2.0
    assert ro.stream.batch_wait_s == ro.stream.group_timeout_s > 0
    assert cells["dynaweb"].collector.groups_per_version == ex2.dream_real_share
    assert _experts_per_batch(ro, groups=4) == [8, 8]  # two groups + 8 experts per batch
    assert set(_experts_per_batch(cells["imitation_matched"], groups=0)) == {8}
    m = _mixer_for(ro)
    for i in range(20):
        m.add_expert(_traj("expert", i))
    m.add_group([_traj("real", i, "a") for i in range(8)], now=0.0)
    assert m.poll(5.0, allow_expert_only=False) == []  # one group: wait for the second
    m.add_group([_traj("real", i, "b") for i in range(8)], now=6.0)
    (b,) = m.poll(6.0, allow_expert_only=False)
    assert sum(t.source == "real" for t in b.trajs()) == 16


def test_policy_lr_reaches_every_arm_and_the_id_only_when_set():
    from evaluation.studies.sample_efficiency.arms import experiment_id

    cfg = SampleEfficiencyConfig()
    ex = resolve_experiment(cfg, quick=False)
    assert ex.policy_lr == 0.0
    ex2 = dataclasses.replace(ex, policy_lr=1e-3)
    assert experiment_id(dataclasses.replace(ex, policy_lr=0.0)) == experiment_id(ex)
    assert experiment_id(ex2) != experiment_id(ex)
    for a in ARMS:
        assert cell_config(cfg, ex, "r", a, 0, init_from="i:1").trainer.lr == cfg.trainer.lr
        assert cell_config(cfg, ex2, "r", a, 0, init_from="i:1").trainer.lr == 1e-3


def test_episode_success_splits_the_policy_versions_in_halves():
    from types import SimpleNamespace as NS

    from evaluation.studies.sample_efficiency.diagnostics import episode_success

    assert episode_success([]) == {}
    ends = [NS(policy_version=v, reward=r) for v, r in [(0, 0), (1, -1), (2, 1), (3, 1), (4, 1)]]
    got = episode_success(ends)
    assert got["episodes"] == 5 and got["success"] == 0.6
    assert got["success_early"] == 0.0  # versions 0, 1 (below the middle, 2)
    assert got["success_late"] == 1.0  # versions 2, 3, 4
    one = episode_success([NS(policy_version=7, reward=1.0)])
    assert one["success_early"] is None and one["success_late"] == 1.0


def test_dream_drop_uniform_reaches_the_dynaweb_arms_and_names_its_own_experiment():
    cfg = SampleEfficiencyConfig()
    ex = resolve_experiment(cfg, False)
    assert "dream_drop_uniform" not in cell_settings(ex)  # off: ids of earlier studies unchanged
    cfg.experiment.dream_drop_uniform = True
    ex2 = resolve_experiment(cfg, False)
    assert experiment_id(ex2) != experiment_id(ex)
    for arm in ("dynaweb", "dynaweb_dream_only"):
        assert cell_config(cfg, ex2, f"r-{arm}", arm, 0, init_from="i:1").dream.drop_uniform_groups
        assert not cell_config(
            cfg, ex, f"r-{arm}", arm, 0, init_from="i:1"
        ).dream.drop_uniform_groups


def test_the_report_pools_only_the_cells_of_its_arms_and_seeds(tmp_path):
    from evaluation.studies.sample_efficiency.study import SampleEfficiency

    cfg = SampleEfficiencyConfig()
    cfg.experiment.seeds, cfg.experiment.arms = [1, 2], ["imitation", "real_only"]
    se = SampleEfficiency(cfg, tmp_path, start_stack=False, echo=False)
    se.cells_dir.mkdir(parents=True)
    for arm, seed in [("imitation", 1), ("real_only", 2), ("real_only", 3), ("dynaweb", 1)]:
        se.cell_file(arm, seed).write_text(json.dumps({"arm": arm, "seed": seed}))
    assert [(c["arm"], c["seed"]) for c in se.load_cells()] == [("imitation", 1), ("real_only", 2)]
