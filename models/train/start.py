"""What a trainer loads when it starts: the versions it resumes, or another run's it starts from.

A trainer with checkpoints of its own resumes (``resume_point``: ``LATEST``, or with
``gate.enabled`` the newest version it wrote); a fresh run with ``trainer.init_from`` starts from
another run's weights (``RUN`` = its LATEST, or ``RUN:VERSION``), with a fresh optimizer and
versions from 0.  Rank 0 decides (``start_plan``) and sends the plan to the other ranks
(``models.train.trainer.Trainer.setup``).
"""

from __future__ import annotations

import logging
from pathlib import Path

from models.checkpoints.store import KINDS, CheckpointStore

log = logging.getLogger(__name__)


def resume_point(store: CheckpointStore, kind: str, gated: bool) -> dict | None:
    """The version to resume ``kind`` from: ``LATEST``, or with ``gate.enabled`` (``gated``) the
    newest version this trainer wrote (a rejected candidate still holds the trainer's newest
    weights)."""
    return store.newest(kind) if gated else store.latest(kind)


def start_plan(store: CheckpointStore, gated: bool, init_from: str) -> dict:
    """Per kind the version to resume (``resume_point``; none: a fresh run) and for a fresh run
    with ``init_from`` (``trainer.init_from``) the other run's versions (``init_entries``):
    ``{"resume": {kind: entry | None}, "init": {kind: entry}}``."""
    resume: dict = {"policy": resume_point(store, "policy", gated)}
    if resume["policy"] is not None:
        resume.update({k: resume_point(store, k, gated) for k in KINDS if k != "policy"})
    init = {}
    if resume["policy"] is None and init_from:
        init = init_entries(store, init_from)
    return {"resume": resume, "init": init}


def init_entries(store: CheckpointStore, spec: str) -> dict[str, dict]:
    """The versions of another run (``RUN`` = its LATEST, or ``RUN:VERSION``; in ``store``'s
    bucket) a fresh run starts from, by kind."""
    src_run, _, ver = spec.partition(":")
    src = CheckpointStore(store.client, store.bucket, src_run)
    entries: dict[str, dict] = {}
    for kind in KINDS:
        if ver:
            entry = {"version": int(ver), "manifest_sha256": None}
        else:
            entry = src.latest(kind)
        if entry is None:
            if kind == "policy":
                raise RuntimeError(
                    f"trainer.init_from={spec!r}: run {src_run!r} has no policy checkpoint"
                )
            continue
        entries[kind] = entry
    return entries


def init_dirs(
    store: CheckpointStore, spec: str, work: Path, entries: dict[str, dict] | None = None
) -> dict[str, Path]:
    """Download another run's checkpoint (``spec`` as for ``init_entries``; ``entries``: the
    versions it chose) under ``work`` as the initial weights of this fresh run, by kind."""
    src_run, _, _ = spec.partition(":")
    src = CheckpointStore(store.client, store.bucket, src_run)
    dirs: dict[str, Path] = {}
    for kind, entry in (init_entries(store, spec) if entries is None else entries).items():
        dest = work / f"init-{kind}"
        src.download(kind, int(entry["version"]), dest, entry.get("manifest_sha256"))
        dirs[kind] = dest
    log.info("initialised from %s (%s)", spec, ", ".join(dirs))
    return dirs
