"""How the trainer makes a version LATEST, tolerant of S3 and broker outages.

``CheckpointWriter`` is the trainer's side of ``models.checkpoints.store``: ``upload`` writes one kind's
files, manifest and (unless it is a gated candidate) ``LATEST``
(``CheckpointStore.save``), ``announce`` sends the announcement
(``streams.checkpoints.send_announcement``), ``flush`` waits until every announcement of the
version is acknowledged, ``prune`` applies the retention.  ``save_engine_state`` writes the
trainer's DeepSpeed state beside the model (``state/``) without the frozen weights.

An S3 outage or a broker outage never ends the trainer: an upload (and the S3 reads around it)
and the announcements' flush are retried with back-off (1 s doubling to 30 s) until they succeed
or the trainer is stopped; every failed attempt is logged and counted
(``dynaweb_trainer_checkpoint_retries_total{stage}``).  ``LATEST`` is written before the
announcement and stays the truth: readers also poll it (``models.checkpoints.reader.ModelSlot.poll``), so
an announcement that comes late delays a reload and never prevents one.  An announcement the
publisher gave up on (``PublishLost``) is sent again; ``PublisherDead`` (the broker gone for longer
than ``kafka.producer_dead_after_s``) is not retried: the trainer exits and is restarted, and
resumes from ``LATEST``.  A failed prune is logged and left to the next checkpoint.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import torch
from kafka.errors import KafkaError

from models import metrics as M
from models.checkpoints.store import KINDS, S3_ERRORS, CheckpointStore, Saved
from streams.checkpoints import send_announcement
from streams.kafka import Publisher, PublishLost

if TYPE_CHECKING:
    from deepspeed import DeepSpeedEngine

log = logging.getLogger(__name__)

T = TypeVar("T")
BACKOFF_S = (1.0, 30.0)  # first and longest wait between two attempts


def retry(
    fn: Callable[[], T],
    *,
    what: str,
    stop: threading.Event,
    retry_on: tuple[type[BaseException], ...],
    on_failure: Callable[[BaseException], None] | None = None,
    backoff_s: tuple[float, float] = BACKOFF_S,
) -> T:
    """``fn()`` until it returns, waiting ``backoff_s[0]`` doubling to ``backoff_s[1]`` after each
    failure of a ``retry_on`` type (logged, ``on_failure(exc)``); once ``stop`` is set the last
    error is raised."""
    wait, attempt = backoff_s[0], 0
    while True:
        try:
            return fn()
        except retry_on as e:
            attempt += 1
            if on_failure is not None:
                on_failure(e)
            log.warning("%s failed (attempt %d): %s; retrying in %.0fs", what, attempt, e, wait)
            if stop.wait(wait):
                raise
            wait = min(backoff_s[1], wait * 2)


class CheckpointWriter:
    def __init__(
        self,
        store: CheckpointStore,
        pub: Publisher,
        topic: str,
        run: str,
        stop: threading.Event,
        *,
        flush_timeout_s: float = 10.0,
        backoff_s: tuple[float, float] = BACKOFF_S,
    ):
        self.store, self.pub, self.topic, self.run = store, pub, topic, run
        self.stop = stop
        self.flush_timeout_s = flush_timeout_s
        self.backoff_s = backoff_s
        self.unflushed: list[Saved] = []  # announced, not yet acknowledged by the broker
        for stage in ("upload", "announce", "prune"):  # export 0 before the first failure
            M.TRAINER_CKPT_RETRIES.labels(run, stage)

    def _retry(self, fn: Callable[[], T], what: str, stage: str, retry_on: tuple) -> T:
        return retry(
            fn,
            what=what,
            stop=self.stop,
            retry_on=retry_on,
            on_failure=lambda _e: M.TRAINER_CKPT_RETRIES.labels(self.run, stage).inc(),
            backoff_s=self.backoff_s,
        )

    # --- S3 ------------------------------------------------------------------------------
    def latest(self, kind: str) -> dict | None:
        return self._retry(
            lambda: self.store.latest(kind), f"reading {kind} LATEST", "upload", S3_ERRORS
        )

    def upload(
        self,
        kind: str,
        version: int,
        local_dir: Path,
        config: dict,
        offsets: dict,
        extra: dict,
        set_latest: bool,
    ) -> Saved:
        """Files, manifest, then ``LATEST`` (``set_latest``); every object is written again on a
        retry (same keys, same bytes)."""
        return self._retry(
            lambda: self.store.save(
                kind, version, local_dir, config, offsets, extra, set_latest=set_latest
            ),
            f"upload of {kind} v{version}",
            "upload",
            S3_ERRORS,
        )

    def write_decision(self, kind: str, version: int, record: dict[str, Any]) -> None:
        self._retry(
            lambda: self.store.write_decision(kind, version, record),
            f"gate decision of {kind} v{version}",
            "upload",
            S3_ERRORS,
        )

    def prune(self, keep: int) -> None:
        for kind in KINDS:
            try:
                self.store.prune(kind, keep)
            except S3_ERRORS as e:
                M.TRAINER_CKPT_RETRIES.labels(self.run, "prune").inc()
                log.warning("pruning %s checkpoints failed: %s; next checkpoint prunes", kind, e)

    # --- the announcement -------------------------------------------------------------------
    def announce(self, saved: Saved) -> None:
        """Send (not flushed: ``flush`` waits for every announcement of the version)."""
        send_announcement(
            self.pub,
            self.topic,
            self.run,
            saved.kind,
            saved.version,
            saved.uri,
            saved.manifest_sha256,
        )
        self.unflushed.append(saved)

    def flush(self) -> None:
        """Wait until the announcements are acknowledged, retrying with back-off."""
        if not self.unflushed:
            return  # a gated candidate: nothing announced
        what = "announcement of " + ", ".join(f"{s.kind} v{s.version}" for s in self.unflushed)
        self._retry(self._flush_once, what, "announce", (KafkaError, PublishLost))
        self.unflushed.clear()

    def _flush_once(self) -> None:
        try:
            self.pub.flush(timeout=self.flush_timeout_s)
        except PublishLost:
            # the publisher gave records up: send the announcements again (readers re-read LATEST
            # and load only a version they do not have, so a duplicate is harmless)
            for saved in list(self.unflushed):
                self.unflushed.remove(saved)
                self.announce(saved)
            raise


def save_engine_state(engine: DeepSpeedEngine, path: str) -> None:
    """The trainer's DeepSpeed state (optimizer, lr schedule, step counts and the weights that
    train) into ``path``, without a frozen weight under any of its names: a LoRA model's base
    (``models.lm.lora``) is named by the checkpoint, never copied into it.  DeepSpeed's own
    ``exclude_frozen_parameters`` drops a weight by its first name only, so a tied weight (the
    output head sharing the input embeddings) would stay under its second; the state dict is
    filtered by storage for the duration of the save."""
    frozen = {p.data_ptr() for p in engine.module.parameters() if not p.requires_grad and p.numel()}

    def drop(module: torch.nn.Module, state: dict, prefix: str, local_metadata: dict) -> None:
        for key in [k for k, v in state.items() if torch.is_tensor(v) and v.data_ptr() in frozen]:
            del state[key]

    hook = engine.module.register_state_dict_post_hook(drop)
    try:
        engine.save_checkpoint(path, tag="ds", exclude_frozen_parameters=True)
    finally:
        hook.remove()
