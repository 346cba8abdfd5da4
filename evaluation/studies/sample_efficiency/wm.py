"""The sample-efficiency study's pretrained world model (``experiment.wm_corpus``).

The DynaWeb arms dream in a world model; one trained only on a few demonstrations stays at
"nothing changes" (docs/experiment.md).  With ``experiment.wm_corpus`` set, the study first
trains a world model once, offline, on the corpus's real transitions of ``corpus_tasks`` (the
loss, batch and schedule of ``dynaweb experiment world-model``: ``evaluation.studies.world_model.train``), with
the study's model size, and saves it as ``OUT/world_model/`` with ``OUT/world_model.json``
(what it was trained on).  Every DynaWeb cell starts its world model there
(``trainer.wm_init_from``); the policy still starts from the imitation arm.  A rerun with the
same ``--out`` reuses it.

Those transitions are real interactions: ``real_transitions`` is charged to the DynaWeb arms
(``offline_real_steps`` in their cells; the headline accounting counts them, the online
accounting does not).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

from core.config import Config
from evaluation.studies.sample_efficiency.config import ExperimentConfig
from evaluation.studies.world_model.config import WorldModelStudyConfig

REPO = Path(__file__).resolve().parents[3]


def corpus_path(spec: str, what: str = "experiment.wm_corpus") -> Path:
    """A transitions file (``what``, e.g. ``experiment.wm_corpus``): absolute, relative to the
    working directory, or to the repository (the committed corpus); a clear error when it is none
    of them."""
    p = Path(spec).expanduser()
    for cand in (p, REPO / p) if not p.is_absolute() else (p,):
        if cand.is_file():
            return cand
    raise FileNotFoundError(
        f"{what}={spec!r}: no such file (collect one with `dynaweb experiment "
        "world-model --out DIR`: DIR/transitions.jsonl; the committed one is "
        "docs/results/world-model/transitions.jsonl.gz)"
    )


def load_corpus(path: Path, tasks: list[str]) -> list:
    """The corpus's transitions of ``tasks`` (``streams.records.Transition``), in file order."""
    from evaluation.eval.sources import read_jsonl

    return [t for t in read_jsonl(str(path)) if t.task in tasks]


def corpus_tasks(ex: ExperimentConfig) -> list[str]:
    """The tasks whose corpus transitions the world model is pretrained on:
    ``experiment.corpus_tasks`` (disjoint from the study's tasks), else the study's ``tasks``."""
    return list(ex.corpus_tasks or ex.tasks)


def corpus_files(spec: str) -> list[Path]:
    """``experiment.wm_corpus``'s files: one path, or several separated by commas (each found by
    ``corpus_path``)."""
    return [corpus_path(s.strip()) for s in spec.split(",") if s.strip()]


def study_config(ex: ExperimentConfig, base: Config, quick: bool) -> WorldModelStudyConfig:
    """The world-model study's training settings at the sample-efficiency study's model size."""
    x = WorldModelStudyConfig.make_quick() if quick else WorldModelStudyConfig()
    x.layers, x.d_model, x.heads = ex.layers, ex.d_model, ex.heads
    x.max_positions = base.model.max_positions
    x.steps = int(ex.wm_pretrain_steps)
    x.time_budget_s = 1e9  # a fixed number of steps: the same model on any machine
    x.seed = 0
    return x


def pretrain(ex: ExperimentConfig, base: Config, out: Path, quick: bool, say: Any) -> dict | None:
    """Train (or reuse) ``OUT/world_model``; returns its record, None without a corpus."""
    if not ex.wm_corpus:
        return None
    meta_file, model_dir = out / "world_model.json", out / "world_model"
    if meta_file.exists() and (model_dir / "config.json").exists():
        return json.loads(meta_file.read_text())
    import torch

    from evaluation.studies.world_model.train import train_world_model

    paths = corpus_files(ex.wm_corpus)
    tasks = corpus_tasks(ex)
    trans = [t for path in paths for t in load_corpus(path, tasks)]
    if not trans:
        raise ValueError(f"experiment.wm_corpus {ex.wm_corpus} holds no transition of {tasks}")
    x = study_config(ex, base, quick)
    say(
        f"pretraining the DynaWeb arms' world model: {x.steps} steps on {len(trans)} real "
        f"transitions of {len(tasks)} tasks from {', '.join(map(str, paths))}"
    )
    threads = torch.get_num_threads()  # the study's own process: restored after training
    torch.set_num_threads(max(1, int(x.threads)))
    t0 = time.time()
    try:
        res = train_world_model(trans, x, model_dir, base.model, log=lambda m: None)
    finally:
        torch.set_num_threads(threads)
    episodes = {(t.run_id, t.episode_id) for t in trans}
    record = {
        "corpus": str(ex.wm_corpus),
        "corpus_sha256": _sha256(paths),
        "real_transitions": len(trans),
        "episodes": len(episodes),
        "per_task": dict(Counter(t.task for t in trans)),
        "steps": res["steps"],
        "seconds": round(time.time() - t0, 1),
        "final_lm_loss_ema": res["final_lm_loss_ema"],
        "settings": dataclasses.asdict(x),
        "dir": str(model_dir),
    }
    meta_file.write_text(json.dumps(record, indent=1))
    say(f"world model pretrained in {record['seconds']:.0f}s -> {model_dir}")
    return record


def _sha256(paths: list[Path]) -> str:
    """The file's SHA-256; for several files, that of their digests joined by newlines, in order."""
    digests = [hashlib.sha256(p.read_bytes()).hexdigest() for p in paths]
    if len(digests) == 1:
        return digests[0]
    return hashlib.sha256("\n".join(digests).encode()).hexdigest()
