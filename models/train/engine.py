"""DeepSpeed engines on any accelerator (CPU here: DS_ACCELERATOR=cpu, gloo).

A torch optimizer is passed in so no DeepSpeed op has to be compiled; the
same code runs under the ``deepspeed`` launcher on GPUs/nodes (the launcher
sets RANK/WORLD_SIZE/MASTER_* and we do not override them).

A single-rank trainer (no WORLD_SIZE, or 1) opens no network rendezvous: its
process group uses an in-process ``HashStore`` and its gloo/NCCL sockets are
pinned to the loopback interface, so it listens on nothing beyond 127.0.0.1.
Several ranks rendezvous through the launcher's MASTER_ADDR/PORT; across nodes
the interface they talk over must be named (``trainer.dist_interface``), and every collective
gives up after ``trainer.dist_timeout_s`` (a killed peer fails one at once).

With several ranks and ZeRO stage 0 the engine does not all-reduce its gradients itself: each
rank's loss is its share's part of the whole batch's loss (``models.train.data_parallel``), the learner
sums the ranks' gradients once per step (``models.train.data_parallel.RankGroup.reduce_grads``, passed to
``engine_step`` as ``reduce``) however many micro-batches each rank ran, and the gradient norm and
clipping then see the whole batch's gradient.  ZeRO stages 1-3 reduce (average) in the engine:
there the learner scales each rank's loss by the world size (``loss_scale``) and the engine
reduces once after the backward (``engine_step``'s ``coalesce``).
"""

from __future__ import annotations

import math
import os
import socket
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, TypeAlias

import torch

from core.config import TrainerConfig

if TYPE_CHECKING:
    from deepspeed import DeepSpeedEngine

Engine: TypeAlias = "DeepSpeedEngine"  # what ``make_engine`` returns (a name for type checkers)

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


def setup_distributed(interface: str = "", timeout_s: float = 300.0) -> None:
    """Initialise torch.distributed once per process (see the module docstring); ``timeout_s``:
    how long a collective of several ranks waits for the others."""
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
    # DeepSpeed's shared-memory all-reduce op serves its inference all-reduce only (the trainer's
    # gradients go through torch.distributed); building it costs a 30 s C++ compile at first start
    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False
    if world <= 1:
        if not torch.distributed.is_initialized():
            # no TCPStore (it listens on every interface): an in-process store for one rank
            torch.distributed.init_process_group(
                backend=backend, store=torch.distributed.HashStore(), rank=0, world_size=1
            )
    # with a group already there DeepSpeed only wraps it; else it rendezvous at MASTER_ADDR/PORT
    deepspeed.init_distributed(dist_backend=backend, timeout=timedelta(seconds=float(timeout_s)))


def world_size() -> int:
    """The number of ranks of this process's group (1 before ``setup_distributed``)."""
    d = torch.distributed
    return d.get_world_size() if d.is_available() and d.is_initialized() else 1


def own_reduce(zero_stage: int) -> bool:
    """Whether the learner sums the ranks' gradients itself (several ranks at ZeRO stage 0: one
    all-reduce per step, whatever each rank's micro-batches); else the engine averages them."""
    return world_size() > 1 and int(zero_stage) == 0


def loss_scale(zero_stage: int) -> float:
    """What each rank's loss (its share's part of the whole batch's) is multiplied by before the
    backward: the world size where the engine averages the ranks' gradients, else 1."""
    n = world_size()
    return 1.0 if n <= 1 or own_reduce(zero_stage) else float(n)


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


def current_lr(engine: Engine) -> float:
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
    dist_timeout_s: float = 300.0,
) -> Engine:
    """A DeepSpeed engine with AdamW at peak ``lr`` and the ``lr_schedule`` (defaults: constant lr);
    ``dist_interface``, ``dist_timeout_s``: ``setup_distributed``'s, for several ranks."""
    import deepspeed

    setup_distributed(dist_interface, dist_timeout_s)
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
    if own_reduce(zero_stage):
        engine.enable_backward_allreduce = False  # the learner sums the gradients once per step
    return engine


def trainer_engine(model: torch.nn.Module, tc: TrainerConfig, kind: str = "policy") -> Engine:
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
        tc.dist_timeout_s,
    )


def engine_step(
    engine: Engine,
    loss: torch.Tensor | None,
    reduce: Callable[[torch.nn.Module], None] | None = None,
    coalesce: bool = False,
) -> float:
    """Backward + step; returns the gradient norm before clipping.  ``loss=None``: the gradients are
    already there (a loss that ran its own micro-batch backwards through ``engine.backward``).
    ``reduce``: sums the ranks' gradients of the module before the norm and the step (several
    ranks at ZeRO stage 0, ``own_reduce``).  ``coalesce`` (several ranks at ZeRO 1-3): the engine
    reduces the gradients once after the backward, in parameter order, not as each gradient
    becomes ready (ranks whose shares build different graphs would pair different gradients)."""
    if loss is not None and coalesce:
        with engine.coalesce_grad_reduction():
            engine.backward(loss)
    elif loss is not None:
        engine.backward(loss)
    if reduce is not None:
        reduce(engine.module)
    total = 0.0
    for p in engine.module.parameters():
        if p.grad is not None:
            total += float(p.grad.detach().pow(2).sum())
    engine.step()
    return total**0.5


def chunked_backward_ok(engine: Engine, zero_stage: int) -> bool:
    """Whether a loss may call ``engine.backward`` once per micro-batch before one ``step``: with
    ZeRO stage 0 the gradients simply add up (several ranks: the engine does not reduce them, the
    learner sums them once before the step, ``own_reduce``); ZeRO 1-3 reduce each parameter once per
    step, so no."""
    return int(zero_stage) == 0 and hasattr(engine, "backward")
