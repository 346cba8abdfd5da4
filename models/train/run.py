"""The trainer as a component: one rank of it in this process (``dynaweb train``; ``core.launch``
starts several).  ``build_trainer`` is the one place the trainer's parts are made from the config
(the S3 store, rank 0's topics, publisher, checkpoint writer and consumer factory, the learner and
its embedder, a scratch folder); ``run_trainer`` starts the component: rank 0 runs
``Trainer.loop`` and tells the other ranks when to stop; the others run ``Trainer.follow``; a lost
rank raises ``models.train.data_parallel.RankLost``."""

from __future__ import annotations

import functools
import tempfile
import threading
from pathlib import Path

from core.config import Config
from core.process import start_component
from core.s3 import make_client
from models import metrics as M
from models.checkpoints.store import CheckpointStore
from models.checkpoints.writer import CheckpointWriter
from models.train.data_parallel import RankGroup, env_world
from models.train.engine import setup_distributed
from models.train.learner import Learner
from models.train.trainer import LeaderParts, Trainer
from streams.kafka import ensure_topics, make_consumer, make_publisher


def build_trainer(
    cfg: Config, stop: threading.Event | None = None, group: RankGroup | None = None
) -> Trainer:
    """A trainer rank wired from ``cfg`` (``group``: this rank's place; None: the only rank).
    Rank 0 alone gets the topics (created if missing), a publisher and the checkpoint writer."""
    stop = stop or threading.Event()
    store = CheckpointStore(make_client(cfg), cfg.s3.bucket, cfg.run_id)
    leader_parts = None
    if group is None or group.leader:  # the other ranks read no topic and write nothing to S3
        topics = ensure_topics(cfg)
        pub = make_publisher(cfg.kafka, client="trainer", run=cfg.run_id)
        writer = CheckpointWriter(store, pub, topics.checkpoints, cfg.run_id, stop)
        leader_parts = LeaderParts(topics, pub, writer, functools.partial(make_consumer, cfg.kafka))
    work = Path(tempfile.mkdtemp(prefix="dynaweb-trainer-"))
    embedder = None
    if cfg.trainer.infonce_weight > 0:
        from models.lm.embedder import default_embedder

        embedder = default_embedder()
    learner = Learner(
        cfg.trainer, cfg.model, cfg.dream.max_change_tokens, cfg.run_id, group, embedder
    )
    return Trainer(cfg, learner, store, work, leader_parts, stop)


def run_trainer(cfg: Config, stop: threading.Event | None = None) -> Trainer:
    """One trainer rank (the only one, or one of the WORLD_SIZE ranks a launcher started: rank 0
    runs ``loop``, the others ``follow``); a lost rank raises ``RankLost``."""
    rank, world = env_world()
    cid, labels = f"trainer-{cfg.run_id}", None
    if world > 1:  # one metrics endpoint per rank, its target labelled with the rank
        cid, labels = f"{cid}-rank{rank}", {"rank": str(rank)}
    stop = start_component(cfg, "trainer", cid, stop, labels=labels)
    group = None
    if world > 1:
        setup_distributed(cfg.trainer.dist_interface, cfg.trainer.dist_timeout_s)
        group = RankGroup(rank, world).start()
    if rank != 0:  # the group's figures come from rank 0 alone (models/metrics.py)
        tr = build_trainer(cfg, stop, group)
        try:
            tr.setup()
            tr.follow()
        finally:
            tr.close()
        return tr
    M.TRAINER_RANKS.labels(cfg.run_id).set(world)
    M.TRAINER_WAITING.labels(cfg.run_id, "models").set(1)  # until setup has loaded them
    M.TRAINER_IDLE.labels(cfg.run_id)  # export 0 before the first idle wait
    for src in (
        "real",
        "dream",
    ):  # the per-source report exists (at 0) before the first group arrives
        for m in (
            M.GSPO_TRAJ,
            M.GSPO_GROUPS,
            M.GSPO_GROUPS_NONZERO,
            M.GSPO_ADV_ABS,
            M.GSPO_CLIPPED,
            M.GSPO_RATIO_SUM,
            M.TRAINER_STALE,
            M.TRAINER_UNGROUPED,
        ):
            m.labels(cfg.run_id, src)
    tr = build_trainer(cfg, stop, group)
    try:
        tr.setup()
        tr.loop()
        if group is not None:
            group.send(("stop",))
    finally:
        tr.close()
    return tr
