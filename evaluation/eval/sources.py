"""What an evaluation reads: checkpoints and transitions.

A checkpoint is a local HF directory, a version number, or ``latest`` of the run's S3 store
(``models.checkpoints.store.CheckpointStore``; downloaded to a temporary directory that ``close``
removes).  Transitions come from a topic, read from the beginning up to a sentinel
(``streams.kafka.read_until_sentinel``), or from a JSONL file; ``heldout_transitions`` keeps the
whole episodes on the held-out side of the stream worker's split (``streams.records.heldout``).
Used by ``dynaweb eval`` (``evaluation.eval.world_model``, ``evaluation.eval.policy``), the gate and
both studies.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from core.config import Config
from streams import records

# --- checkpoints ---------------------------------------------------------------


class Loaded:
    def __init__(
        self, model: Any, tokenizer: Any, version: int | None, source: str, work: Path | None
    ):
        self.model, self.tokenizer, self.version, self.source, self.work = (
            model,
            tokenizer,
            version,
            source,
            work,
        )

    def close(self) -> None:
        if self.work is not None:
            shutil.rmtree(self.work, ignore_errors=True)


def load_checkpoint(cfg: Config, kind: str, spec: str | None) -> Loaded:
    """``spec``: a local HF directory, a version number, or 'latest' (from the run's S3 store)."""
    from models.lm.saved import load_model
    from models.policy.model import Policy
    from models.world_model.model import WorldModel

    cls = Policy if kind == "policy" else WorldModel
    spec = str(spec or "latest")
    if os.path.isdir(spec):
        d = Path(spec) / "hf" if (Path(spec) / "hf").is_dir() else Path(spec)
        model, tok = load_model(cls, str(d))
        return Loaded(model, tok, None, str(d), None)
    from core.s3 import make_client
    from models.checkpoints.store import CheckpointStore

    store = CheckpointStore(make_client(cfg), cfg.s3.bucket, cfg.run_id)
    if spec == "latest":
        lat = store.latest(kind)
        if lat is None:
            raise ValueError(f"run {cfg.run_id!r} has no {kind} checkpoint yet")
        version, digest = int(lat["version"]), lat.get("manifest_sha256")
    else:
        try:
            version = int(spec)
        except ValueError:
            raise ValueError(
                f"--checkpoint expects VERSION, 'latest' or a directory, got {spec!r}"
            ) from None
        if version not in store.versions(kind):
            raise ValueError(
                f"{kind} version {version} does not exist in run {cfg.run_id!r}; "
                f"see `dynaweb checkpoint list --kind {kind}`"
            )
        digest = None
    work = Path(tempfile.mkdtemp(prefix=f"dynaweb-eval-{kind}-"))
    store.download(kind, version, work / "ckpt", digest, only="hf/")
    model, tok = load_model(cls, str(work / "ckpt" / "hf"))
    return Loaded(model, tok, version, store.uri(kind, version), work)


# --- reading transitions ---------------------------------------------------------


def read_topic(cfg: Config, topic: str, timeout: float) -> list[records.Transition]:
    """Every transition on ``topic`` up to a sentinel (controls and bad records skipped)."""
    from streams.kafka import is_control, read_until_sentinel

    out = []
    for _m, raw in read_until_sentinel(cfg.kafka, topic, cfg.run_id, timeout=timeout):
        if raw is None or is_control(raw):
            continue
        try:
            out.append(records.decode(raw, expect="transition"))
        except records.RecordError:
            continue
    return out


def topic_exists(cfg: Config, topic: str) -> bool:
    from streams.kafka import make_consumer

    c = make_consumer(cfg.kafka)
    try:
        return topic in c.topics()
    finally:
        c.close()


def read_jsonl(path: str) -> list[records.Transition]:
    """Transitions, one JSON object per line; a name ending in ``.gz`` is read gzip-compressed."""
    out = []
    p = Path(path)
    if p.suffix == ".gz":
        import gzip

        text = gzip.decompress(p.read_bytes()).decode("utf-8")
    else:
        text = p.read_text()
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append(records.decode(line, expect="transition"))
        except records.RecordError as e:
            raise ValueError(f"{path}:{n}: not a transition: {e}") from None
    return out


def heldout_transitions(transitions: list, fraction: float) -> list:
    """Whole episodes on the held-out side of the stream worker's split."""
    from streams.records import heldout

    return [t for t in transitions if heldout(t.episode_id, fraction)]
