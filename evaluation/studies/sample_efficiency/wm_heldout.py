"""The real transitions the sample-efficiency study's world-model probe scores (``wm_probe``).

The probed world models (each DynaWeb arm's final one, and the imitation arm's) trained on the
arm's own real transitions, the imitation arm's demonstrations and, with ``experiment.wm_corpus``,
the corpus's transitions of its tasks (``experiment.corpus_tasks``, else ``tasks``).  The probe
scores them on real transitions of (task, seed) pairs none of those ever held
(``evaluation.studies.world_model.split``: the world-model study's ``task_seed`` rule), with every
transition whose exact world-model input occurs in that training data removed: whole episodes,
taken from the pools in order (the real-only arm's collection of the same study seed, then the
corpus's transitions of the study's tasks), one task after the other, until at least
``PROBE_LEAST`` transitions are in.  An episode is never cut, so every terminal step of the
chosen episodes is scored.  Pure functions, apart from ``trained_on`` and ``probe_pools``, which
read the corpus files.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from evaluation.studies.sample_efficiency.config import ExperimentConfig
from evaluation.studies.sample_efficiency.wm import corpus_files, corpus_tasks, load_corpus
from evaluation.studies.world_model.split import input_key, pair

PROBE_LEAST = 1000  # transitions the probe scores at least


def _episodes(pool: list) -> list[list]:
    """The real episodes of ``pool`` (dreams dropped), in order of first appearance, each by step."""
    eps: dict[tuple, list] = {}
    for t in pool:
        if t.source != "dream":
            eps.setdefault((t.run_id, t.episode_id), []).append(t)
    return [sorted(e, key=lambda t: t.step) for e in eps.values()]


def _by_task(episodes: list[list]) -> list[list]:
    """The episodes in turns, one of each task after the other (tasks in order of appearance)."""
    queues: dict[str, list] = defaultdict(list)
    for e in episodes:
        queues[e[0].task].append(e)
    out, k = [], 0
    while any(k < len(q) for q in queues.values()):
        out += [q[k] for q in queues.values() if k < len(q)]
        k += 1
    return out


def probe_transitions(pools: list[list], trained: list, least: int = PROBE_LEAST) -> list:
    """At least ``least`` real transitions of ``pools`` that the world models never trained on
    (``trained``): episodes whose (task, seed) pair is in ``trained`` are left out, and so is
    every step whose exact input (``input_key``) is; whole episodes, pool after pool, the tasks
    of a pool in turns, until ``least`` are in.  ValueError when the pools hold fewer."""
    pairs = {pair(t) for t in trained}
    keys = {input_key(t) for t in trained}
    out: list = []
    taken: set = set()
    for pool in pools:
        for ep in _by_task(_episodes(pool)):
            if len(out) >= least:
                return out
            if pair(ep[0]) in pairs or (ep[0].run_id, ep[0].episode_id) in taken:
                continue
            taken.add((ep[0].run_id, ep[0].episode_id))
            out += [t for t in ep if input_key(t) not in keys]
    if len(out) < least:
        raise ValueError(
            f"the world-model probe needs {least} real transitions of seeds the arm never "
            f"collected; the pools hold {len(out)}"
        )
    return out


def probe_record(chosen: list, trained: list) -> dict:
    """What the probe's data is, for the cell (``wm_fidelity``): sizes, terminal steps, tasks,
    and that no (task, seed) pair of it was trained on (``shared_pairs`` 0)."""
    return {
        "transitions": len(chosen),
        "episodes": len({(t.run_id, t.episode_id) for t in chosen}),
        "terminal_steps": sum(bool(t.done) for t in chosen),
        "per_task": dict(sorted(_count(t.task for t in chosen).items())),
        "split": "task_seed",
        "trained_pairs": len({pair(t) for t in trained}),
        "shared_pairs": len({pair(t) for t in chosen} & {pair(t) for t in trained}),
    }


def _count(items: Any) -> dict:
    out: dict = defaultdict(int)
    for x in items:
        out[x] += 1
    return out


def trained_on(ex: ExperimentConfig, collected: list, pretrained: bool) -> list:
    """What the probed world models trained on: ``collected`` (the dream arm's and the
    imitation arm's real transitions) and, when the DynaWeb arms' world model was pretrained,
    the corpus's transitions of its tasks (``wm.corpus_tasks``)."""
    out = list(collected)
    if pretrained and ex.wm_corpus:
        tasks = corpus_tasks(ex)
        out += [t for p in corpus_files(ex.wm_corpus) for t in load_corpus(p, tasks)]
    return out


def probe_pools(ex: ExperimentConfig, real_only: list) -> list[list]:
    """Where the probe's transitions come from, in order: the real-only arm's collection, then
    the corpus's transitions of the study's tasks (``experiment.wm_corpus``; those the world model
    was pretrained on are left out by ``probe_transitions``)."""
    pools = [list(real_only)]
    if ex.wm_corpus:
        pools.append(
            [t for p in corpus_files(ex.wm_corpus) for t in load_corpus(p, list(ex.tasks))]
        )
    return pools


def probe_data(
    ex: ExperimentConfig,
    real_only: list,
    collected: list,
    pretrained: bool,
    least: int = PROBE_LEAST,
) -> tuple[list, dict]:
    """(the probe's transitions, their record): ``probe_transitions`` of ``probe_pools`` against
    ``trained_on`` (``collected``: the probed arm's and the imitation arm's real transitions)."""
    trained = trained_on(ex, collected, pretrained)
    chosen = probe_transitions(probe_pools(ex, real_only), trained, least)
    return chosen, probe_record(chosen, trained)
