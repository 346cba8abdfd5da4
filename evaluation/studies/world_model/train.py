"""Step 2 of ``dynaweb experiment world-model``: offline training of the world model on real
transitions (``train_world_model``: ``world_model_batch_loss``, the study's sampler and schedule
from ``evaluation.studies.world_model.sampling``), with one history row per logged step.  The
sample-efficiency study pretrains its DynaWeb arms' world model with it."""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

import torch

from core.config import ModelConfig
from evaluation.studies.world_model.config import WorldModelStudyConfig, model_config
from evaluation.studies.world_model.sampling import batches, lr_at, terminal_indices


def train_world_model(
    transitions: list,
    x: WorldModelStudyConfig,
    out_dir: Path,
    base: ModelConfig,
    embedder: Any = None,
    log: Any = print,
) -> dict:
    """Offline training on ``transitions`` with ``world_model_batch_loss``; saves ``out_dir``.
    The model is ``base`` (the user's ``model`` section) at the study's size (``model_config``)."""
    from core.config import TrainerConfig
    from models.lm.saved import make_model
    from models.world_model.loss import world_model_batch_loss
    from models.world_model.model import WorldModel

    torch.manual_seed(x.seed)
    rng = random.Random(x.seed)
    model, tok = make_model(WorldModel, model_config(x, base))
    tcfg = TrainerConfig(
        infonce_weight=x.infonce_weight,
        wm_lr=x.lr,
        grad_clip=x.grad_clip,
        wm_head_weight=x.head_weight,
    )
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=x.lr, weight_decay=0.0)
    if (
        embedder is not None and x.infonce_weight > 0
    ):  # the frozen targets once (cached), not inside the timed loop
        pages = list(dict.fromkeys(t.next_obs["tree"] for t in transitions))
        if len(pages) <= getattr(embedder, "cache_size", 0):
            embedder.embed(pages)
    model.train()
    t0 = time.time()
    hist: list[dict] = []
    it = batches(len(transitions), x.batch, rng, terminal_indices(transitions), x.terminal_share)
    step, seen, ema = 0, 0, None
    while step < x.steps and time.time() - t0 < x.time_budget_s:
        for g in opt.param_groups:
            g["lr"] = lr_at(
                step,
                max(step / max(1, x.steps), (time.time() - t0) / max(1e-9, x.time_budget_s)),
                x.lr,
                x.warmup,
                x.min_lr_fraction,
            )
        batch = [transitions[i] for i in next(it)]
        opt.zero_grad(set_to_none=True)
        _, st = world_model_batch_loss(
            model,
            tok,
            batch,
            tcfg,
            embedder,
            x.max_change_tokens,
            backward=True,
            chunk_rows=x.chunk_rows,
        )
        gn = float(torch.nn.utils.clip_grad_norm_(params, x.grad_clip))
        opt.step()
        if tcfg.wm_head_weight > 0:  # the step trained the heads: predict uses them
            model.mark_heads_trained(change_head=True)
        step += 1
        seen += len(batch)
        ema = st["lm_loss"] if ema is None else 0.95 * ema + 0.05 * st["lm_loss"]
        if step % x.log_every == 0 or step == 1:
            row = history_row(step, time.time() - t0, st, ema, gn, opt.param_groups[0]["lr"])
            hist.append(row)
            log(format_history_row(row))
    secs = time.time() - t0
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out_dir))
    tok.save_pretrained(str(out_dir))
    return {
        "steps": step,
        "transitions_seen": seen,
        "epochs": round(seen / max(1, len(transitions)), 2),
        "seconds": round(secs, 1),
        "final_lm_loss_ema": round(ema or 0.0, 4),
        "history": hist,
        "parameters": sum(p.numel() for p in params),
    }


def history_row(step: int, secs: float, st: dict, ema: float, grad_norm: float, lr: float) -> dict:
    """One logged training step (``train_history.json``): losses, gradient norm, learning rate and
    the reward/done heads' figures when the loss reported them."""
    heads = (
        "reward_head_loss",
        "reward_head_acc",
        "done_head_loss",
        "done_head_acc",
        "change_head_loss",
        "change_head_acc",
    )
    return {
        "step": step,
        "s": round(secs, 1),
        "lm_loss": round(st["lm_loss"], 4),
        "lm_loss_ema": round(ema, 4),
        "infonce": round(st["infonce"], 4),
        "grad_norm": round(grad_norm, 3),
        "lr": round(lr, 6),
        **{k: round(st[k], 4) for k in heads if k in st},
    }


def format_history_row(row: dict) -> str:
    return (
        f"  step {row['step']:5d}  {row['s']:7.1f}s  lm {row['lm_loss']:.4f} (ema {row['lm_loss_ema']:.4f})  "
        f"infonce {row['infonce']:.3f}  |g| {row['grad_norm']:.2f}  lr {row['lr']:.2e}"
        + (
            f"  heads r {row['reward_head_acc']:.2f} d {row['done_head_acc']:.2f}"
            if "reward_head_acc" in row
            else ""
        )
        + (f" change {row['change_head_acc']:.2f}" if "change_head_acc" in row else "")
    )
