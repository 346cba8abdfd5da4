"""The replay check's arithmetic (evaluation/eval/replay.py); the live replay runs in
tests/integration/test_replay_check.py."""

from __future__ import annotations

from evaluation.eval.replay import auroc, dreamed_rollouts, summarize
from streams.records import Transition


def test_auroc():
    assert auroc([0.9, 0.8, 0.1], [True, True, False]) == 1.0
    assert auroc([0.1, 0.9], [True, False]) == 0.0
    assert auroc([0.5, 0.5], [True, False]) == 0.5  # a tie counts half
    assert auroc([0.9, 0.7, 0.6, 0.2], [True, False, True, False]) == 0.75
    assert auroc([0.3], [True]) is None and auroc([], []) is None


def _t(ep, step, *, last=False, source="dream", start_step=0, reward=0.0, p=None, done=True):
    info = {"start_step": start_step}
    if p is not None:
        info["p_success"] = p
    return Transition(
        run_id="r", episode_id=ep, step=step, task="miniwob/click-test", seed=3, source=source,
        policy_version=2, world_model_version=2, obs={"instruction": "x", "tree": ""},
        action=f"click({step + 1})", next_obs={"instruction": "x", "tree": ""},
        reward=reward if last else 0.0, done=done and last, truncated=False, info=info,
    )  # fmt: skip


def test_only_complete_dreams_from_a_first_page_are_replayed():
    ts = [_t("a", 0), _t("a", 1, last=True, reward=1.0, p=0.8)]  # complete, from step 0
    ts += [_t("b", 0, start_step=2), _t("b", 1, last=True, start_step=2)]  # from a later page
    ts += [_t("c", 1, last=True)]  # step 0 missing
    ts += [_t("d", 0), _t("d", 1, done=False)]  # neither done nor truncated
    ts += [_t("e", 0, last=True, source="real", reward=1.0)]  # not a dream
    (ro,) = dreamed_rollouts(ts)
    assert ro["episode_id"] == "a" and ro["actions"] == ["click(1)", "click(2)"]
    assert ro["dreamed_success"] and ro["dreamed_score"] == 0.8 and ro["seed"] == 3


def test_summary_per_task_and_version():
    rows = [
        {
            "task": "t1",
            "policy_version": 1,
            "dreamed_success": True,
            "dreamed_score": 0.9,
            "real_success": True,
        },
        {
            "task": "t1",
            "policy_version": 1,
            "dreamed_success": True,
            "dreamed_score": 0.7,
            "real_success": False,
        },
        {
            "task": "t2",
            "policy_version": 2,
            "dreamed_success": False,
            "dreamed_score": 0.1,
            "real_success": False,
        },
        {
            "task": "t2",
            "policy_version": 2,
            "error": "boom",
            "dreamed_success": False,
            "dreamed_score": 0.0,
            "real_success": False,
        },
    ]
    s = summarize(rows)
    assert s["n"] == 3 and s["errors"] == 1 and s["dream_reward_auroc"] == 1.0
    assert s["by_task"]["t1"] == {
        "n": 2,
        "dreamed_success": 1.0,
        "real_success": 0.5,
        "agreement": 0.5,
    }
    assert s["by_policy_version"]["2"]["agreement"] == 1.0
