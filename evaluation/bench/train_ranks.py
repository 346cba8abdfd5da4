"""``dynaweb bench train --ranks N``: the data-parallel trainer against one rank, on the same batches.

One rank (this process, ``threads`` torch threads) and N ranks (``core.launch.LocalRanks``: N
processes, gloo, ``threads // N`` threads each, as ``dynaweb train --ranks N`` runs them) each
build the from-config models from the same seed and run the trainer's updates
(``models.train.learner.policy_update`` / ``world_model_update``, with the rank's
``RankGroup``) on the same batches of the stream worker's shape (``evaluation.bench.synthetic``):

* the first batch: one policy and one world-model update from the same weights; rank 0 saves
  the weights after it, and ``rank_update_max_abs_diff`` is the largest |difference| of any
  parameter between the N-rank and the one-rank update (``rank_update_max_rel_diff``: divided by
  the largest |change| the one-rank update made; float32 rounding of the weights themselves is
  about 1e-8 here); ``rank_loss_grad_norm_rel_diff``: the largest relative difference of the whole
  batch's loss or gradient norm (before clipping) between the two (Adam's step hardly depends on
  the gradient's scale, these do);
* the next ``steps`` batches, timed: ``samples_per_s_1`` / ``samples_per_s_N`` are (policy
  trajectories + world-model transitions) per second of update time, ``policy_trajectories_per_s_*``
  and ``world_model_transitions_per_s_*`` the two models' own rates, ``speedup`` = N over 1.
  With the default ``threads`` 1 every rank has one thread: N ranks use N cores where one rank
  uses one (a rank with several threads on a busy machine can be much slower than with one).

Both runs go in one process tree on one machine, one after the other.  Prints a table (or only the
JSON with ``--json``) and one JSON object on the last line.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from core.config import Config, load_config
from core.spaces import Observation


def _updates(cfg: Config, starts: list[dict], steps: int, out: Path, group: Any = None) -> dict:
    """One rank's share of the bench (see the module doc); rank 0 writes ``params-<world>.pt``."""
    from evaluation.bench.synthetic import synthetic_batch
    from models.lm.saved import make_model
    from models.policy.model import Policy
    from models.train.engine import trainer_engine
    from models.train.learner import policy_update, world_model_update
    from models.world_model.model import WorldModel

    torch.set_num_threads(cfg.threads)
    torch.set_flush_denormal(True)  # as core.process does for the trainer component
    world = 1 if group is None else group.world
    obs = [Observation.from_dict(s["obs"]) for s in starts]
    embedder = None
    if cfg.trainer.infonce_weight > 0:
        from models.lm.embedder import default_embedder

        embedder = default_embedder()
    torch.manual_seed(cfg.model.seed)
    pol, tok = make_model(Policy, cfg.model)
    wm, wtok = make_model(WorldModel, cfg.model)
    start = {
        "policy": {k: v.detach().clone() for k, v in pol.state_dict().items()},
        "world_model": {k: v.detach().clone() for k, v in wm.state_dict().items()},
    }
    pe = trainer_engine(pol, cfg.trainer, "policy")
    we = trainer_engine(wm, cfg.trainer, "world_model")
    batches = [synthetic_batch(cfg, obs, k * 7) for k in range(steps + 1)]

    def p_step(trajs: list) -> tuple:
        pe.train()
        loss, _, gn, _ = policy_update(pe, tok, trajs, cfg.trainer, cfg.model, None, group)
        return float(loss.detach()), gn

    def w_step(trans: list) -> tuple:
        we.train()
        loss, _, gn = world_model_update(
            we, wtok, trans, cfg.trainer, embedder, cfg.dream.max_change_tokens, group
        )
        return float(loss.detach()), gn

    first = {"policy": p_step(batches[0][0]), "world_model": w_step(batches[0][1])}
    if group is None or group.leader:
        after = {
            "policy": {k: v.detach().clone() for k, v in pe.module.state_dict().items()},
            "world_model": {k: v.detach().clone() for k, v in we.module.state_dict().items()},
        }
        torch.save(
            {"start": start, "after": after, "loss_grad_norm": first}, out / f"params-{world}.pt"
        )

    def sync() -> None:
        if group is not None:
            group.barrier()

    sync()
    t0 = time.perf_counter()
    for trajs, _ in batches[1:]:
        p_step(trajs)
    sync()
    tp = time.perf_counter() - t0
    t0 = time.perf_counter()
    for _, trans in batches[1:]:
        w_step(trans)
    sync()
    tw = time.perf_counter() - t0
    res = {
        "world": world,
        "threads": cfg.threads,
        "policy_s": tp,
        "world_model_s": tw,
        "trajectories": sum(len(b[0]) for b in batches[1:]),
        "transitions": sum(len(b[1]) for b in batches[1:]),
    }
    if group is None or group.leader:
        (out / f"times-{world}.json").write_text(json.dumps(res))
    return res


def _max_diffs(a: dict, b: dict) -> tuple[float, float]:
    """(max |a - b| over every parameter of both models after the update, the largest |change| the
    update ``a`` made from its start).  (Adam's first step hardly depends on the gradient's scale:
    ``rank_loss_grad_norm_rel_diff`` checks the scale.)"""
    diff = change = 0.0
    for kind in ("policy", "world_model"):
        for k, v in a["after"][kind].items():
            if not torch.is_floating_point(v):
                continue
            diff = max(diff, float((v - b["after"][kind][k]).abs().max()))
            change = max(change, float((v - a["start"][kind][k]).abs().max()))
    return diff, change


def bench_train_ranks(cfg: Config, starts: list[dict], ranks: int = 2, steps: int = 3) -> dict:
    from core.launch import LocalRanks

    if ranks < 2:
        raise ValueError(f"bench train --ranks needs 2 or more, got {ranks}")
    with tempfile.TemporaryDirectory(prefix="dynaweb-bench-ranks-") as tmp:
        out = Path(tmp)
        spec = out / "spec.json"
        spec.write_text(json.dumps({"starts": starts, "steps": steps, "out": str(out)}))
        one = _updates(cfg, starts, steps, out)
        group = LocalRanks(
            cfg,
            ranks,
            [str(spec)],
            name="bench-train-ranks",
            entry=("-m", "evaluation.bench.train_ranks"),
            out=sys.stderr,
        ).start()
        if group.wait() != 0:
            raise RuntimeError(f"bench train --ranks {ranks}: a rank failed (its output above)")
        many = json.loads((out / f"times-{ranks}.json").read_text())
        p1, pn = torch.load(out / "params-1.pt"), torch.load(out / f"params-{ranks}.pt")
        diff, change = _max_diffs(p1, pn)
        # the whole batch's loss and gradient norm before the step, 1 rank against N
        scale = max(
            abs(x - y) / max(abs(x), 1e-30)
            for kind in ("policy", "world_model")
            for x, y in zip(p1["loss_grad_norm"][kind], pn["loss_grad_norm"][kind], strict=True)
        )

    def rates(r: dict) -> dict:
        return {
            "samples": (r["trajectories"] + r["transitions"])
            / (r["policy_s"] + r["world_model_s"]),
            "policy": r["trajectories"] / r["policy_s"],
            "wm": r["transitions"] / r["world_model_s"],
        }

    r1, rn = rates(one), rates(many)
    n = ranks
    return {
        "ranks": n,
        "rank_update_max_abs_diff": diff,
        "rank_update_max_rel_diff": diff / max(change, 1e-30),
        "update_max_abs_change": change,
        "rank_loss_grad_norm_rel_diff": scale,
        "samples_per_s_1": round(r1["samples"], 3),
        f"samples_per_s_{n}": round(rn["samples"], 3),
        "speedup": round(rn["samples"] / r1["samples"], 3),
        "policy_trajectories_per_s_1": round(r1["policy"], 3),
        f"policy_trajectories_per_s_{n}": round(rn["policy"], 3),
        "world_model_transitions_per_s_1": round(r1["wm"], 3),
        f"world_model_transitions_per_s_{n}": round(rn["wm"], 3),
        "threads_1": one["threads"],
        f"threads_per_rank_{n}": many["threads"],
        "steps": steps,
        "batch_trajectories": cfg.stream.batch_trajectories,
        "wm_batch": cfg.trainer.wm_batch,
        "zero_stage": cfg.trainer.zero_stage,
        "model": f"{cfg.model.layers}x{cfg.model.d_model}",
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }


def main() -> int:
    """A rank of the N-rank run (started by ``bench_train_ranks`` through ``LocalRanks``)."""
    import logging

    from models.train.data_parallel import RankGroup, env_world
    from models.train.engine import setup_distributed

    logging.basicConfig(level=logging.WARNING)
    spec = json.loads(Path(sys.argv[1]).read_text())
    cfg = load_config()
    rank, world = env_world()
    setup_distributed(cfg.trainer.dist_interface, cfg.trainer.dist_timeout_s)
    group = RankGroup(rank, world).start()
    try:
        _updates(cfg, spec["starts"], int(spec["steps"]), Path(spec["out"]), group)
    finally:
        group.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
