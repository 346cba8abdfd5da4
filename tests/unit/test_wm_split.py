"""The world-model study's split (evaluation/studies/world_model/split.py): whole (task, seed) pairs
held out, exact-input duplicates removed, unseen tasks kept out of training."""

import pytest

from evaluation.studies.world_model.split import (
    drop_pairs,
    drop_seen_inputs,
    heldout_pair,
    input_key,
    leak_counts,
    pair,
    split_by_episode,
    split_by_task_seed,
    split_sides,
    split_tasks,
)
from tests.factories import real_transition

pytestmark = pytest.mark.unit


def _t(task="miniwob/a", seed=0, ep="e", step=0, tree="[1] button", action="click(1)", **kw):
    """Step ``step`` of a two-step episode that succeeds."""
    return real_transition(task, seed, ep, step, tree=tree, action=action, **kw)


def _corpus(tasks=("miniwob/a", "miniwob/b"), seeds=40, episodes=3):
    """Several episodes per (task, seed), as the perturbed expert runs them; pages differ by seed."""
    return [
        _t(task, s, f"{task}-{s}-{e}", step, tree=f"[1] button {task} {s} {step}")
        for task in tasks
        for s in range(seeds)
        for e in range(episodes)
        for step in range(2)
    ]


def test_task_seed_split_holds_out_every_episode_of_a_held_out_seed():
    ts = _corpus()
    train, held = split_by_task_seed(ts, 0.3)
    assert train and held and len(train) + len(held) == len(ts)
    assert {pair(t) for t in train}.isdisjoint({pair(t) for t in held})
    assert all(heldout_pair(t.task, t.seed, 0.3) for t in held)
    held_eps = {t.episode_id for t in held}
    assert all(t.episode_id in held_eps for t in ts if pair(t) in {pair(h) for h in held})


def test_no_held_out_seed_leaks_into_training_also_through_train_only_files():
    ts = _corpus()
    extra = [  # a --train-data file that ran more episodes on the same seeds
        _t(t.task, t.seed, "more-" + t.episode_id, t.step, tree=t.obs["tree"]) for t in ts
    ]
    sides = split_sides(ts, extra, "task_seed", 0.3)
    held_pairs = {pair(t) for t in sides["held"]}
    assert held_pairs, "nothing held out"
    leaked = held_pairs & {pair(t) for t in sides["train"]}
    assert not leaked, f"held-out (task, seed) pairs in training: {sorted(leaked)}"
    assert sides["leak"]["heldout_pairs_in_train"] == 0
    assert sides["counts"]["train_only_dropped_heldout_pairs"] == sum(
        pair(t) in held_pairs for t in extra
    )
    # the per-episode rule does leak on the same data: the check above can fail
    old = split_sides(ts, extra, "episode", 0.3)
    assert old["leak"]["heldout_pairs_in_train"] > 0
    assert old["leak"]["same_label_duplicates"] > 0


def test_held_out_inputs_seen_in_training_are_removed_and_counted():
    train = [_t(seed=1, tree="[1] button OK"), _t(seed=2, step=1, tree="[1] button Go")]
    held = [
        _t(seed=9, tree="[1] button OK"),  # the same input on another seed: removed
        _t(seed=9, step=1, tree="[1] button Go"),  # a terminal duplicate: removed
        _t(seed=9, tree="[1] button OK", focused=1),  # focus differs: kept
        _t(seed=9, tree="[1] button OK", action="click(2)"),  # action differs: kept
        _t(seed=9, tree="[1] button OK", instruction="Other."),  # instruction differs: kept
    ]
    kept, gone = drop_seen_inputs(held, train)
    assert kept == held[2:]
    assert gone == {"transitions": 2, "terminal_steps": 1, "same_label": 2}
    assert len({input_key(t) for t in held}) == 5
    lc = leak_counts(train, held)
    assert lc["input_duplicates"] == 2 and lc["input_duplicates_terminal"] == 1
    assert lc["heldout_pairs"] == 1 and lc["heldout_pairs_in_train"] == 0


def test_the_task_seed_split_leaves_no_exact_input_of_training_in_the_held_out_set():
    ts = _corpus(seeds=30) + [
        _t("miniwob/a", 1000 + s, f"x{s}", tree="[1] same") for s in range(30)
    ]
    sides = split_sides(ts, [], "task_seed", 0.3)
    seen = {input_key(t) for t in sides["train"]}
    assert sides["counts"]["heldout_removed_duplicates"]["transitions"] > 0
    assert not any(input_key(t) in seen for t in sides["held"])


def test_held_out_tasks_never_enter_training_and_are_their_own_set():
    ts = _corpus(tasks=("miniwob/a", "miniwob/b", "miniwob/c"))
    extra = [_t("miniwob/c", 500, "extra-c"), _t("miniwob/a", 500, "extra-a")]
    sides = split_sides(ts, extra, "task_seed", 0.3, ["miniwob/c"])
    assert {t.task for t in sides["unseen"]} == {"miniwob/c"}
    assert len(sides["unseen"]) == sum(t.task == "miniwob/c" for t in ts)
    assert "miniwob/c" not in {t.task for t in sides["train"] + sides["held"]}
    assert sides["counts"]["train_only_dropped_unseen_tasks"] == 1
    assert split_tasks(ts, ()) == (ts, [])


def test_helpers_and_the_split_names():
    ts = _corpus(seeds=4, episodes=1)
    kept, n = drop_pairs(ts, {("miniwob/a", 0), ("miniwob/b", 3)})
    assert n == 4 and len(kept) == len(ts) - 4
    assert split_by_episode(ts, 0.0) == (ts, [])
    with pytest.raises(ValueError, match="wm_study.split"):
        split_sides(ts, [], "random", 0.3)


def test_the_config_section_types_the_split_and_rejects_holding_out_every_task():
    from evaluation.studies.world_model.config import WorldModelStudyConfig

    x = WorldModelStudyConfig()
    assert x.split == "task_seed" and x.heldout_tasks == []
    WorldModelStudyConfig(heldout_tasks=x.tasks[:2]).validate()
    with pytest.raises(ValueError, match="heldout_tasks"):
        WorldModelStudyConfig(tasks=x.tasks[:2], heldout_tasks=x.tasks[:2]).validate()
    with pytest.raises(ValueError, match="split"):
        WorldModelStudyConfig(split="seed").validate()  # type: ignore[arg-type]
