"""DeepSpeed engines on any accelerator (CPU here: DS_ACCELERATOR=cpu, gloo).

A torch optimizer is passed in so no DeepSpeed op has to be compiled; the
same code runs under the ``deepspeed`` launcher on GPUs/nodes (the launcher
sets RANK/WORLD_SIZE/MASTER_* and we do not override them).

A single-rank trainer (no WORLD_SIZE, or 1) opens no network rendezvous: its
process group uses an in-process ``HashStore`` and its gloo/NCCL sockets are
pinned to the loopback interface, so it listens on nothing beyond 127.0.0.1.
Several ranks rendezvous through the launcher's MASTER_ADDR/PORT; across nodes
the interface they talk over must be named (``trainer.dist_interface``).
"""

from __future__ import annotations

import math
import os
import socket
from typing import Any

import torch

from core.config.runtime import TrainerConfig

LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")


def loopback_interface() -> str:
    """The name of the interface holding 127.0.0.1 (``lo`` on Linux, ``lo0`` on macOS)."""
    try:
        import psutil  # a dependency of DeepSpeed

        for name, addrs in psutil.net_if_addrs().items():
            if any(a.family == socket.AF_INET and a.address == "127.0.0.1" for a in addrs):
                return name
    except ImportError:
        pass
    return "lo"


def bind_interface(interface: str, world_size: int, master_addr: str) -> str | None:
    """The interface torch.distributed's gloo/NCCL sockets must use, or None to leave the
    environment's choice (GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME already set).  One rank, or
    several on one host (MASTER_ADDR on loopback), with no interface named: loopback.  Several
    hosts: the ``trainer.dist_interface`` named; none is a ValueError (never a silent guess of a
    public interface)."""
    if interface:
        return interface
    if world_size <= 1 or master_addr in LOCAL_HOSTS:
        return loopback_interface()
    if os.environ.get("GLOO_SOCKET_IFNAME") or os.environ.get("NCCL_SOCKET_IFNAME"):
        return None
    raise ValueError(
        f"a multi-node trainer (WORLD_SIZE={world_size}, MASTER_ADDR={master_addr}) needs the "
        "network interface its ranks talk over: set trainer.dist_interface (e.g. eth0, ib0)"
    )


def setup_distributed(interface: str = "") -> None:
    """Initialise torch.distributed once per process (see the module docstring)."""
    if not torch.cuda.is_available():
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    world = int(os.environ.get("WORLD_SIZE", "1") or 1)
    for k, v in (("RANK", "0"), ("WORLD_SIZE", "1"), ("LOCAL_RANK", "0")):
        os.environ.setdefault(k, v)  # DeepSpeed reads them (LOCAL_RANK in particular)
    ifname = bind_interface(interface, world, os.environ.get("MASTER_ADDR", ""))
    if ifname is not None:
        # an explicit interface (or loopback) wins over the environment's
        os.environ["GLOO_SOCKET_IFNAME"] = os.environ["NCCL_SOCKET_IFNAME"] = ifname
    import deepspeed

    backend = "nccl" if torch.cuda.is_available() else "gloo"
    if world <= 1:
        # The shared-memory all-reduce op only helps several ranks on one host; at world
        # size 1 building it costs a 30 s C++ compile on first start and gains nothing.
        deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False
        if not torch.distributed.is_initialized():
            # no TCPStore (it listens on every interface): an in-process store for one rank
            torch.distributed.init_process_group(
                backend=backend, store=torch.distributed.HashStore(), rank=0, world_size=1
            )
    # with a group already there DeepSpeed only wraps it; else it rendezvous at MASTER_ADDR/PORT
    deepspeed.init_distributed(dist_backend=backend)


def lr_factor(
    step: int, warmup_steps: int = 0, decay_steps: int = 0, min_lr_ratio: float = 0.0
) -> float:
    """Learning-rate multiplier for the optimizer step ``step`` (0-based; the lr of step ``k`` is
    ``peak * lr_factor(k)``): linear warm-up ``(k + 1) / warmup_steps`` over the first ``warmup_steps``
    steps, then cosine decay from 1 to ``min_lr_ratio`` over ``decay_steps`` steps, then flat at
    ``min_lr_ratio`` (``decay_steps`` 0: constant 1 after the warm-up)."""
    step = max(0, int(step))
    if warmup_steps > 0 and step < warmup_steps:
        return (step + 1) / warmup_steps
    if decay_steps <= 0:
        return 1.0
    p = min(1.0, (step - max(0, warmup_steps)) / decay_steps)
    return min_lr_ratio + (1.0 - min_lr_ratio) * 0.5 * (1.0 + math.cos(math.pi * p))


def lr_schedule(
    optimizer: torch.optim.Optimizer,
    warmup_steps: int = 0,
    decay_steps: int = 0,
    min_lr_ratio: float = 0.0,
) -> torch.optim.lr_scheduler.LambdaLR:
    """``LambdaLR`` over ``lr_factor``: stepped by ``engine.step()`` after each optimizer step and saved /
    restored with the engine's checkpoint (its step count and peak lr; the schedule's shape comes
    from the config of the running process)."""
    w, d, m = int(warmup_steps), int(decay_steps), float(min_lr_ratio)

    def factor(
        step: int,
    ) -> float:  # a plain function: LambdaLR's state dict then holds no parameters
        return lr_factor(step, w, d, m)

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def current_lr(engine: Any) -> float:
    """The learning rate the engine's next step uses (first parameter group)."""
    return float(engine.optimizer.param_groups[0]["lr"])


def make_engine(
    model: torch.nn.Module,
    lr: float,
    zero_stage: int = 0,
    grad_clip: float = 1.0,
    warmup_steps: int = 0,
    decay_steps: int = 0,
    min_lr_ratio: float = 0.0,
    dist_interface: str = "",
) -> Any:
    """A DeepSpeed engine with AdamW at peak ``lr`` and the ``lr_schedule`` (defaults: constant lr);
    ``dist_interface``: ``setup_distributed``'s network interface of a multi-node trainer."""
    import deepspeed

    setup_distributed(dist_interface)
    opt = torch.optim.AdamW(
        [p for p in model.parameters() if p.requires_grad], lr=lr, weight_decay=0.0
    )
    sched = lr_schedule(opt, warmup_steps, decay_steps, min_lr_ratio)
    ds_config = {
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": 1,
        "zero_optimization": {"stage": zero_stage},
        "gradient_clipping": grad_clip,
        "steps_per_print": 10**9,
        "wall_clock_breakdown": False,
    }
    engine, _, _, _ = deepspeed.initialize(
        model=model, optimizer=opt, lr_scheduler=sched, config=ds_config
    )
    return engine


def trainer_engine(model: torch.nn.Module, tc: TrainerConfig, kind: str = "policy") -> Any:
    """``make_engine`` with ``TrainerConfig``: peak ``tc.lr`` (policy) or ``tc.wm_lr`` (world model), one
    schedule shape for both (``warmup_steps``, ``decay_steps``, ``min_lr_ratio``; each model counts its own
    optimizer steps)."""
    return make_engine(
        model,
        tc.wm_lr if kind == "world_model" else tc.lr,
        tc.zero_stage,
        tc.grad_clip,
        tc.warmup_steps,
        tc.decay_steps,
        tc.min_lr_ratio,
        tc.dist_interface,
    )


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
