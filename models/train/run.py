"""The trainer as a component: one rank of it in this process (``dynaweb train``; ``core.launch``
starts several).  Rank 0 runs ``Trainer.loop`` and tells the other ranks when to stop; the others
run ``Trainer.follow``; a lost rank raises ``models.train.ranks.RankLost``."""

from __future__ import annotations

import threading

from core.config import Config
from core.process import start_component
from models import metrics as M
from models.train.engine import setup_distributed
from models.train.ranks import RankGroup, env_world
from models.train.trainer import Trainer


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
        tr = Trainer(cfg, stop, group)
        try:
            tr.setup()
            tr.follow()
        finally:
            tr.close()
        return tr
    M.TRAINER_RANKS.labels(cfg.run_id).set(world)
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
    tr = Trainer(cfg, stop, group)
    try:
        tr.setup()
        tr.loop()
        if group is not None:
            group.send(("stop",))
    finally:
        tr.close()
    return tr
