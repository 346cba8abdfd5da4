"""The dream generator as a component (``dynaweb dream``): ``build_dreamer`` is the one place its
parts are made from the config (the run's topics, created if missing; the S3 store and the two
model slots; a publisher; the consumer factory; the announcement watcher; ``dream.pace``'s credit
window), ``run_dreamer`` starts it and runs its loop until stopped."""

from __future__ import annotations

import functools
import threading

from core.config import Config, DreamConfig, StreamConfig
from core.process import start_component
from core.s3 import make_client
from models import metrics as M
from models.checkpoints.reader import ModelSlot, reader_workdir
from models.checkpoints.store import CheckpointStore
from models.dream.dreamer import Dreamer
from models.dream.pacing import CreditWindow, auto_window_groups
from streams.checkpoints import CheckpointWatcher
from streams.kafka import ensure_topics, make_consumer, make_publisher


def pace_window(
    dream: DreamConfig, stream: StreamConfig, checkpoint_every: int
) -> CreditWindow | None:
    """The credit window ``dream.pace`` asks for (None when off): ``dream.pace_window_groups``
    groups, or sized from the batch's dream share, ``stream.max_staleness`` and the trainer's
    ``checkpoint_every``."""
    d, s = dream, stream
    if not d.pace:
        return None
    groups = d.pace_window_groups or auto_window_groups(
        s.max_staleness,
        checkpoint_every,
        s.batch_trajectories,
        s.expert_fraction,
        1.0 if list(s.policy_sources) == ["dream"] else 0.5,
        d.group_size,
    )
    return CreditWindow(groups * d.group_size, s.max_staleness, d.pace_timeout_s)


def build_dreamer(cfg: Config, producer_id: str, stop: threading.Event | None = None) -> Dreamer:
    """A dream generator wired from ``cfg``: it has opened no consumer and loaded no model yet
    (``Dreamer.setup``)."""
    topics = ensure_topics(cfg)
    store = CheckpointStore(make_client(cfg), cfg.s3.bucket, cfg.run_id)
    work = reader_workdir("dream", cfg.s3.reader_dir)
    slots = {
        k: ModelSlot(
            store, k, work, cfg.run_id, poll_s=cfg.s3.latest_poll_s, model_config=cfg.model
        )
        for k in ("policy", "world_model")
    }
    pub = make_publisher(cfg.kafka, client="dream", run=cfg.run_id)

    def watch(on_announcement):  # partition 0: where the trainer announces
        return CheckpointWatcher(
            cfg.kafka,
            [topics.checkpoints],
            on_announcement=on_announcement,
            partitions=(0,),
            poll_ms=500,
        )

    return Dreamer(
        cfg.run_id,
        producer_id,
        cfg.dream,
        cfg.model,
        topics,
        slots,
        pub,
        functools.partial(make_consumer, cfg.kafka),
        watch,
        work,
        credit=pace_window(cfg.dream, cfg.stream, cfg.trainer.checkpoint_every),
        stop=stop,
    )


def run_dreamer(cfg: Config, producer_id: str, stop: threading.Event | None = None) -> Dreamer:
    stop = start_component(cfg, "dream", producer_id, stop)
    M.DREAM_RATE_FACTOR.labels(cfg.run_id).set(
        1.0
    )  # full speed until told otherwise (series exists from start)
    M.DREAM_HEADS_TRAINED.labels(cfg.run_id).set(0.0)
    M.DREAM_IN_FLIGHT.labels(cfg.run_id).set(0.0)
    M.DREAM_PACE_WRITTEN_OFF.labels(cfg.run_id)
    M.DREAM_P_SUCCESS.labels(cfg.run_id)
    M.DREAM_UNIFORM_PUBLISHED.labels(cfg.run_id)
    for outcome in ("varied", "uniform"):
        M.DREAM_GROUPS.labels(cfg.run_id, outcome)
    for end in ("done", "horizon", "stop"):
        M.DREAM_ROLLOUT_ENDS.labels(cfg.run_id, end)
    d = build_dreamer(cfg, producer_id, stop)
    try:
        d.setup()
        d.loop()
    finally:
        d.close()
    return d
