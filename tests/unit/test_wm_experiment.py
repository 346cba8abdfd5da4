"""Pure helpers of ``dynaweb experiment world-model`` (evaluation/studies/world_model/study.py)."""

import math
import random

import pytest

from evaluation.studies.world_model.sampling import batches, lr_at
from evaluation.studies.world_model.study import (
    METRICS,
    WorldModelStudyConfig,
    beats,
    episode_outcomes,
    eval_command,
    failed_share,
    format_result,
    split_by_episode,
)
from streams.records import Transition, heldout


def _t(
    ep: str,
    step: int,
    reward: float = 0.0,
    done: bool = False,
    truncated: bool = False,
    source: str = "real",
):
    obs = {"instruction": "i", "url": "", "tree": '[1] button "OK"'}
    return Transition(
        run_id="r",
        episode_id=ep,
        step=step,
        task="t",
        seed=0,
        source=source,
        policy_version=0,
        world_model_version=0,
        obs=obs,
        action="click(1)",
        next_obs=obs,
        reward=reward,
        done=done,
        truncated=truncated,
    )


def test_split_by_episode_uses_the_stream_workers_rule_and_never_splits_an_episode():
    ts = [_t(f"ep{i}", s) for i in range(60) for s in range(3)]
    train, held = split_by_episode(ts, 0.3)
    assert len(train) + len(held) == len(ts) and held and train
    assert {t.episode_id for t in train}.isdisjoint({t.episode_id for t in held})
    assert all(heldout(t.episode_id, 0.3) for t in held) and not any(
        heldout(t.episode_id, 0.3) for t in train
    )
    assert split_by_episode(ts, 0.0) == (ts, [])


def test_episode_outcomes_and_failed_share():
    ts = [
        _t("a", 0),
        _t("a", 1, 1.0, True),  # success
        _t("b", 0),
        _t("b", 1, -1.0, True),  # failure
        _t("c", 0),
        _t("c", 1),
        _t("c", 2, truncated=True),  # ran out of steps
        _t("d", 1, 1.0, True),
        _t("d", 0),
    ]  # success, steps out of order
    assert episode_outcomes(ts) == {"a": True, "b": False, "c": False, "d": True}
    assert failed_share(ts) == pytest.approx(5 / 9)
    assert failed_share([]) == 0.0


def test_lr_schedule_warmup_then_cosine_to_the_floor():
    assert lr_at(0, 0.0, 1.0, 10) == pytest.approx(0.1)
    assert lr_at(9, 0.0, 1.0, 10) == pytest.approx(1.0)
    assert lr_at(10, 0.0, 1.0, 10) == pytest.approx(1.0)
    assert lr_at(50, 0.5, 1.0, 10, 0.0) == pytest.approx(0.5)
    assert lr_at(99, 1.0, 1.0, 10, 0.1) == pytest.approx(0.1)
    assert lr_at(99, 7.0, 1.0, 10, 0.1) == pytest.approx(0.1)  # past the end: the floor
    xs = [lr_at(s, s / 100, 2e-3, 5, 0.05) for s in range(5, 101)]
    assert all(a >= b for a, b in zip(xs, xs[1:], strict=False)) and all(
        math.isfinite(x) for x in xs
    )


def test_beats_is_strict_per_metric():
    m = {"exact_match": 0.7, "change_f1": 0.6, "reward_bal_acc": 0.5, "done_bal_acc": 0.9}
    b = {"exact_match": 0.6, "change_f1": 0.6, "reward_bal_acc": 0.5, "done_bal_acc": 0.5}
    assert beats(m, b) == {
        "exact_match": True,
        "change_f1": False,
        "reward_bal_acc": False,
        "done_bal_acc": True,
    }


def test_batches_cover_each_epoch_once():
    it = batches(10, 4, random.Random(0))
    epoch = [next(it), next(it)]  # 10 // 4 = 2 full batches, the short one dropped
    assert all(len(b) == 4 for b in epoch) and len({i for b in epoch for i in b}) == 8
    small = batches(3, 8, random.Random(0))
    assert sorted(next(small)) == [0, 1, 2]
    with pytest.raises(ValueError):
        next(batches(0, 4, random.Random(0)))


def test_quick_config_is_small_and_eval_command_is_the_eval_cli(tmp_path):
    q, full = WorldModelStudyConfig.make_quick(), WorldModelStudyConfig()
    assert q.quick and not full.quick
    assert (
        q.steps < full.steps
        and q.time_budget_s < full.time_budget_s
        and q.expert_episodes < full.expert_episodes
    )
    assert q.perturbed_episodes > 0  # the plumbing check collects near misses too
    cmd = eval_command(tmp_path, 0.2)
    assert cmd.startswith("dynaweb eval world-model --checkpoint ") and "--split all" in cmd
    assert str(tmp_path / "heldout.jsonl") in cmd  # the held-out set the study wrote


def test_format_result_prints_every_metric_side_by_side():
    fig = dict.fromkeys(METRICS, 0.5)
    res = {
        "quick": True,
        "world_model": "2x64",
        "train": {"steps": 3, "epochs": 1.0},
        "data": {"train_transitions": 10, "train_episodes": 4, "train_failed_share": 0.5},
        "n_eval": 5,
        "eval_episodes": 2,
        "model": {**fig, "ok_rate": 1.0},
        "baseline": fig,
        "beats_baseline": dict.fromkeys(METRICS, False),
        "seconds": {"collect": 1, "train": 2, "eval": 3, "total": 6},
        "eval_command": "dynaweb eval world-model",
    }
    text = format_result(res)
    for k in METRICS:
        assert k in text
    assert "nothing-changes" in text and "dynaweb eval world-model" in text


def test_data_files_are_concatenated_in_order_and_an_episode_in_two_is_refused(tmp_path):
    from core.config import load_config
    from evaluation.eval.sources import read_jsonl
    from evaluation.studies.world_model.study import load_or_collect, write_jsonl

    a, b, dup = tmp_path / "a.jsonl", tmp_path / "b.jsonl", tmp_path / "dup.jsonl"
    write_jsonl(a, [_t("e1", 0), _t("e1", 1, 1.0, True)])
    write_jsonl(b, [_t("e2", 0, -1.0, True)])
    write_jsonl(dup, [_t("e1", 5)])
    x = WorldModelStudyConfig()
    out = tmp_path / "transitions.jsonl"
    trans, counts = load_or_collect(load_config(), x, out, [str(a), str(b)])
    assert [(t.episode_id, t.step) for t in trans] == [("e1", 0), ("e1", 1), ("e2", 0)]
    assert counts["from_file"] == [str(a), str(b)]
    assert [(t.episode_id, t.step) for t in read_jsonl(str(out))] == [
        ("e1", 0),
        ("e1", 1),
        ("e2", 0),
    ]
    with pytest.raises(ValueError, match="already in an earlier file"):
        load_or_collect(load_config(), x, out, [str(a), str(dup)])
    one, _ = load_or_collect(load_config(), x, tmp_path / "one.jsonl", str(b))
    assert [t.episode_id for t in one] == ["e2"]


def test_training_only_files_are_read_whole_and_never_share_an_episode(tmp_path):
    from evaluation.studies.world_model.study import train_only, write_jsonl

    extra, dup = tmp_path / "extra.jsonl", tmp_path / "dup.jsonl"
    write_jsonl(extra, [_t("x1", 0), _t("x1", 1, 1.0, True), _t("d", 0, source="dream")])
    write_jsonl(dup, [_t("e1", 3)])
    split = [_t("e1", 0), _t("e2", 0)]
    got = train_only([str(extra)], split, log=lambda m: None)
    assert [(t.episode_id, t.step) for t in got] == [("x1", 0), ("x1", 1)]  # dreams never
    with pytest.raises(ValueError, match="already in the data"):
        train_only([str(dup)], split, log=lambda m: None)
    with pytest.raises(ValueError, match="already in the data"):
        train_only([str(extra), str(extra)], split, log=lambda m: None)
    assert train_only(None, split) == []
