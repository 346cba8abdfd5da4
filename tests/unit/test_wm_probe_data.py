"""The sample-efficiency study's world-model probe data (evaluation/studies/sample_efficiency/
wm_heldout.py): real transitions of seeds the arm never collected, whole episodes, at least 1,000."""

import pytest

from evaluation.studies.sample_efficiency.config import ExperimentConfig
from evaluation.studies.sample_efficiency.wm import corpus_tasks
from evaluation.studies.sample_efficiency.wm_heldout import (
    PROBE_LEAST,
    probe_pools,
    probe_record,
    probe_transitions,
    trained_on,
)
from evaluation.studies.world_model.split import pair
from tests.factories import real_transition

pytestmark = pytest.mark.unit


def _t(task, seed, ep, step, n_steps=3, run="r", tree=None):
    """Step ``step`` of an ``n_steps`` episode; odd seeds succeed."""
    return real_transition(
        task,
        seed,
        ep,
        step,
        last_step=n_steps - 1,
        success=bool(seed % 2),
        tree=tree or f"[1] {task} {seed} {step}",
        instruction="Do.",
        run=run,
    )


def _episodes(tasks, seeds, run="r", per_seed=1, n_steps=3):
    return [
        _t(task, s, f"{run}-{task}-{s}-{k}", step, n_steps, run)
        for task in tasks
        for s in seeds
        for k in range(per_seed)
        for step in range(n_steps)
    ]


TASKS = ("miniwob/a", "miniwob/b")


def test_no_seed_the_arm_collected_is_scored_and_episodes_are_whole():
    collected = _episodes(TASKS, range(0, 100), run="dyn")  # the dream arm's own seeds
    real_only = _episodes(TASKS, range(50, 400), run="ro", per_seed=2)  # overlaps 50..99
    chosen = probe_transitions([real_only], collected, least=PROBE_LEAST)
    assert len(chosen) >= PROBE_LEAST
    leaked = {pair(t) for t in chosen} & {pair(t) for t in collected}
    assert not leaked, f"the probe scores seeds the arm collected: {sorted(leaked)[:5]}"
    eps = {}
    for t in chosen:
        eps.setdefault(t.episode_id, []).append(t.step)
    assert all(sorted(v) == [0, 1, 2] for v in eps.values())  # every terminal step is in
    assert sum(t.done for t in chosen) == len(eps)
    assert {t.task for t in chosen} == set(TASKS)  # the tasks in turns, not one task first
    rec = probe_record(chosen, collected)
    assert rec["shared_pairs"] == 0 and rec["transitions"] == len(chosen)
    assert rec["terminal_steps"] == len(eps)


def test_later_pools_fill_up_and_too_few_is_an_error():
    collected = _episodes(TASKS, range(0, 10), run="dyn")
    small = _episodes(TASKS, range(10, 60), run="ro")  # 300 transitions
    corpus = _episodes(TASKS, range(0, 400), run="corpus")  # seeds 0..9 were collected
    chosen = probe_transitions([small, corpus], collected, least=1000)
    assert len(chosen) >= 1000
    assert all(t in chosen for t in small)  # the first pool first
    assert not {pair(t) for t in chosen} & {pair(t) for t in collected}
    with pytest.raises(ValueError, match="needs 1000"):
        probe_transitions([small], collected, least=1000)


def test_inputs_the_world_models_trained_on_are_left_out():
    trained = [_t("miniwob/a", 1, "x", 0, tree="[1] same page")]
    pool = [_t("miniwob/a", 7, "y", s, tree="[1] same page" if s == 0 else None) for s in range(3)]
    chosen = probe_transitions([pool], trained, least=1)
    assert [t.step for t in chosen] == [1, 2]


def test_pretraining_corpus_counts_as_trained_and_pools_read_the_corpus(tmp_path):
    from collectors.demos import to_line

    f = tmp_path / "corpus.jsonl"
    corpus = _episodes(("miniwob/a", "miniwob/c"), range(5), run="corpus")
    f.write_text("".join(to_line(t) + "\n" for t in corpus))
    ex = ExperimentConfig(tasks=["miniwob/a"], wm_corpus=str(f))
    assert corpus_tasks(ex) == ["miniwob/a"]
    assert len(trained_on(ex, [], pretrained=True)) == 15
    assert trained_on(ex, [], pretrained=False) == []
    pools = probe_pools(ex, [])
    assert pools[0] == [] and {t.task for t in pools[1]} == {"miniwob/a"}
    ex2 = ExperimentConfig(tasks=["miniwob/a"], corpus_tasks=["miniwob/c"], wm_corpus=str(f))
    assert {t.task for t in trained_on(ex2, [], pretrained=True)} == {"miniwob/c"}
    # pretrained on other tasks: the corpus's episodes of the study's tasks are fair probe data
    assert len(probe_transitions(probe_pools(ex2, []), trained_on(ex2, [], True), least=15)) == 15


def test_probe_data_scores_only_unseen_seeds_of_the_real_only_collection():
    from evaluation.studies.sample_efficiency.wm_heldout import probe_data

    ex = ExperimentConfig(tasks=list(TASKS), wm_corpus="")
    collected = _episodes(TASKS, range(0, 200), run="dyn")
    real_only = _episodes(TASKS, range(0, 600), run="ro")
    chosen, rec = probe_data(ex, real_only, collected, pretrained=False)
    assert rec["transitions"] == len(chosen) >= PROBE_LEAST and rec["shared_pairs"] == 0
    assert min(t.seed for t in chosen) >= 200
