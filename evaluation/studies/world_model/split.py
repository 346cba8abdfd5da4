"""The world-model study's split of real transitions into training and held-out sides
(``wm_study.split``, ``wm_study.heldout_tasks``).

* ``task_seed`` (the default): a (task, seed) pair is held out whole (``heldout_pair``: the stream
  worker's hash rule on ``"task/seed"``), so no page of a held-out seed is ever trained on, even
  when a policy ran several episodes on it; the ``--train-data`` files' transitions of held-out
  pairs are dropped from training (and counted).  Then every held-out transition whose exact
  world-model input (``input_key``: the prompt the model reads, built from the instruction, the
  page, the focus, the last error and the action) also occurs in training is removed (and
  counted, with its terminal steps).
* ``episode``: the earlier per-episode rule (``streams.records.heldout(episode_id)``); several
  episodes of one seed may land on both sides.  Kept so the earlier figures can be reproduced.
* ``heldout_tasks``: those tasks never enter training; their transitions are a third set, scored
  separately (``unseen_tasks``).

Pure functions on ``streams.records.Transition`` lists, apart from ``train_only`` (reads files).
"""

from __future__ import annotations

from typing import Any

SPLITS = ("task_seed", "episode")


def pair(t: Any) -> tuple[str, int]:
    """The (task, seed) a transition was collected on."""
    return (str(t.task), int(t.seed))


def heldout_pair(task: str, seed: int, fraction: float) -> bool:
    """Is the (task, seed) pair held out?  The stream worker's stable hash rule on ``task/seed``."""
    from streams.records import heldout

    return heldout(f"{task}/{int(seed)}", fraction)


def split_by_episode(transitions: list, fraction: float) -> tuple[list, list]:
    """(train, held-out) with the stream worker's per-episode rule: no episode on both sides."""
    from streams.records import heldout

    train, held = [], []
    for t in transitions:
        (held if heldout(t.episode_id, fraction) else train).append(t)
    return train, held


def split_by_task_seed(transitions: list, fraction: float) -> tuple[list, list]:
    """(train, held-out) by (task, seed) pair: every episode of a held-out pair is held out."""
    train, held = [], []
    for t in transitions:
        (held if heldout_pair(t.task, t.seed, fraction) else train).append(t)
    return train, held


def drop_pairs(transitions: list, pairs: set) -> tuple[list, int]:
    """(the transitions whose (task, seed) is not in ``pairs``, how many were dropped)."""
    kept = [t for t in transitions if pair(t) not in pairs]
    return kept, len(transitions) - len(kept)


def input_key(t: Any) -> str:
    """The world model's exact input for a transition: the prompt text it reads
    (``models.lm.prompts.world_model_prompt``: instruction, page, focus, last error, action)."""
    from core.spaces import Observation
    from models.lm.prompts import world_model_prompt

    return world_model_prompt(Observation.from_dict(t.obs), str(t.action))


def _label(t: Any) -> tuple:
    return (t.next_obs["tree"] if t.next_obs else None, float(t.reward) > 0, bool(t.done))


def drop_seen_inputs(held: list, train: list) -> tuple[list, dict]:
    """(the held-out transitions whose exact input (``input_key``) never occurs in ``train``,
    counts of the removed ones: ``transitions``, ``terminal_steps``, and how many of them had a
    training duplicate with the same label (next page, success, done))."""
    labels: dict[str, set] = {}
    for t in train:
        labels.setdefault(input_key(t), set()).add(_label(t))
    kept, gone, same = [], [], 0
    for t in held:
        k = input_key(t)
        if k in labels:
            gone.append(t)
            same += _label(t) in labels[k]
        else:
            kept.append(t)
    return kept, {
        "transitions": len(gone),
        "terminal_steps": sum(bool(t.done) for t in gone),
        "same_label": same,
    }


def leak_counts(train: list, held: list) -> dict:
    """What a split's held-out side shares with its training side: held-out (task, seed) pairs
    and how many of them are also trained on; held-out transitions (and terminal steps) with an
    exact input duplicate in training, and with the same label too."""
    tr_pairs = {pair(t) for t in train}
    held_pairs = {pair(t) for t in held}
    labels: dict[str, set] = {}
    for t in train:
        labels.setdefault(input_key(t), set()).add(_label(t))
    dup = [t for t in held if input_key(t) in labels]
    dup_same = [t for t in dup if _label(t) in labels[input_key(t)]]
    return {
        "heldout_pairs": len(held_pairs),
        "heldout_pairs_in_train": len(held_pairs & tr_pairs),
        "heldout_transitions": len(held),
        "heldout_terminal_steps": sum(bool(t.done) for t in held),
        "input_duplicates": len(dup),
        "input_duplicates_terminal": sum(bool(t.done) for t in dup),
        "same_label_duplicates": len(dup_same),
        "same_label_duplicates_terminal": sum(bool(t.done) for t in dup_same),
    }


def split_tasks(transitions: list, tasks: list[str] | tuple = ()) -> tuple[list, list]:
    """(transitions of the other tasks, transitions of ``tasks``): the unseen tasks' set."""
    out = set(tasks)
    return [t for t in transitions if t.task not in out], [t for t in transitions if t.task in out]


def train_only(files: list | None, trans: list, log: Any = print) -> list:
    """The transitions of ``files`` (``--train-data``), for training only; an episode also in
    ``trans`` (the split data) or in two of them is an error: it would leak into the held-out
    side or count twice."""
    from evaluation.eval.sources import read_jsonl

    out: list = []
    seen = {t.episode_id for t in trans}
    for f in files or []:
        part = [t for t in read_jsonl(f) if t.source != "dream"]
        eps = {t.episode_id for t in part}
        if eps & seen:
            raise ValueError(f"--train-data {f}: {len(eps & seen)} episode(s) already in the data")
        seen |= eps
        out += part
    if out:
        log(f"training only: {len(out)} transitions from {len(files or [])} file(s)")
    return out


def split_sides(trans: list, extra: list, split: str, fraction: float, heldout_tasks=()) -> dict:
    """The three sides of the study's data: ``train`` (the split's training side of ``trans``
    plus ``extra``, the ``--train-data`` transitions), ``held`` (held out, seen tasks) and
    ``unseen`` (every transition of ``heldout_tasks``); with ``counts``: what was dropped from
    training and removed from the held-out sides, and ``leak``, what the held-out side shared
    with training before the duplicates were removed."""
    if split not in SPLITS:
        raise ValueError(f"wm_study.split must be one of {SPLITS}, got {split!r}")
    trans, unseen = split_tasks(trans, heldout_tasks)
    extra, extra_unseen = split_tasks(extra, heldout_tasks)
    counts: dict = {"train_only_dropped_unseen_tasks": len(extra_unseen)}
    if split == "episode":
        train, held = split_by_episode(trans, fraction)
        train = train + extra
        return {"train": train, "held": held, "unseen": unseen, "counts": counts,
                "leak": leak_counts(train, held)}  # fmt: skip
    train, held = split_by_task_seed(trans, fraction)
    extra, counts["train_only_dropped_heldout_pairs"] = drop_pairs(extra, {pair(t) for t in held})
    train = train + extra
    leak = leak_counts(train, held)
    held, counts["heldout_removed_duplicates"] = drop_seen_inputs(held, train)
    unseen, counts["unseen_removed_duplicates"] = drop_seen_inputs(unseen, train)
    return {"train": train, "held": held, "unseen": unseen, "counts": counts, "leak": leak}
