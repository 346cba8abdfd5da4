"""DeepSpeed engines on any accelerator (CPU here: DS_ACCELERATOR=cpu, gloo).

A torch optimizer is passed in so no DeepSpeed op has to be compiled; the
same code runs under the ``deepspeed`` launcher on GPUs/nodes (the launcher
sets RANK/WORLD_SIZE/MASTER_* and we do not override them).
"""

from __future__ import annotations

import os
import socket
from typing import Any

import torch


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def setup_distributed() -> None:
    if not torch.cuda.is_available():
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    single = "WORLD_SIZE" not in os.environ or os.environ["WORLD_SIZE"] == "1"
    for k, v in (("MASTER_ADDR", "127.0.0.1"), ("RANK", "0"), ("WORLD_SIZE", "1"), ("LOCAL_RANK", "0")):
        os.environ.setdefault(k, v)
    os.environ.setdefault("MASTER_PORT", str(_free_port()))
    import deepspeed

    if single:
        # The shared-memory all-reduce op only helps several ranks on one host; at world
        # size 1 building it costs a 30 s C++ compile on first start and gains nothing.
        deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False
    if not torch.distributed.is_initialized():
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        deepspeed.init_distributed(dist_backend=backend)


def make_engine(model: torch.nn.Module, lr: float, zero_stage: int = 0, grad_clip: float = 1.0) -> Any:
    import deepspeed

    setup_distributed()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr, weight_decay=0.0)
    ds_config = {
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": 1,
        "zero_optimization": {"stage": zero_stage},
        "gradient_clipping": grad_clip,
        "steps_per_print": 10**9,
        "wall_clock_breakdown": False,
    }
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=opt, config=ds_config)
    return engine


def engine_step(engine: Any, loss: torch.Tensor | None) -> float:
    """Backward + step; returns the gradient norm before clipping.  ``loss=None``: the gradients are
    already there (a loss that ran its own micro-batch backwards through ``engine.backward``)."""
    if loss is not None:
        engine.backward(loss)
    total = 0.0
    for p in engine.module.parameters():
        if p.grad is not None:
            total += float(p.grad.detach().pow(2).sum())
    engine.step()
    return total**0.5


def chunked_backward_ok(engine: Any, zero_stage: int) -> bool:
    """Whether a loss may call ``engine.backward`` once per micro-batch before one ``step``: with
    ZeRO stage 0 the gradients simply add up (and an all-reduce of a sum already reduced on every
    rank leaves it unchanged); ZeRO 1-3 reduce each parameter once per step, so no."""
    return int(zero_stage) == 0 and hasattr(engine, "backward")
