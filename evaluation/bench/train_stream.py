"""``dynaweb bench train --stream``: the trainer fed by the real topics against the same trainer fed
in-memory batches, in one run (``stream_over_synthetic``; target >= 0.9).

On the embedded stack (S3 and the broker on loopback; started if not running, stopped after) one
real ``models.train.trainer.Trainer`` (its ``setup``: version 0 to S3, DeepSpeed engines, its consumer)
trains on batches of the stream worker's shape (``evaluation.bench.synthetic.synthetic_batch``: half expert,
half a dream group with behaviour log-probs).

stream
    A producer thread keeps the policy-batch topic ``--ahead`` batches ahead of the trainer (so
    data always exists) and the trainer's own loop (``Trainer.loop``: poll, decode, stale check,
    update) runs ``--steps`` policy steps after ``warmup`` steps; the rate is taken between the
    first and the last measured step.  ``trainer_idle_s``: the loop's own idle time meanwhile
    (``dynaweb_trainer_idle_seconds_total``; 0 = it never waited).
memory
    The same trainer (same engines, same batches, already decoded) through ``Trainer.policy_step``,
    the same number of steps, timed the same way, before and after the stream run (the mean of
    the two is the denominator: a drift in the machine's speed shows as their difference).

World-model training is off in both runs (``trainer.train_world_model=false``) and checkpoints
are not written during them, so the two runs do the same work: policy updates.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
import uuid
from typing import Any

from core.config import Config
from evaluation.operations import StackFactory

WARMUP_STEPS = 1


def _batches(cfg: Config, starts: list[dict], n: int) -> list[bytes]:
    from core.spaces import Observation
    from evaluation.bench.synthetic import synthetic_batch
    from streams import records

    obs = [Observation.from_dict(s["obs"]) for s in starts]
    out = []
    for k in range(n):
        trajs, _ = synthetic_batch(cfg, obs, k * 7)
        b = records.TrainingBatch(
            run_id=cfg.run_id,
            batch_id=f"bench-{k}",
            worker_id="bench",
            kind="mixed",
            trajectories=[dict(vars(t)) for t in trajs],
            expert_fraction=cfg.stream.expert_fraction,
        )
        out.append(records.encode(b))
    return out


class _Feeder(threading.Thread):
    """Publishes the batches (each a new batch id) so that ``ahead`` more exist than were trained."""

    def __init__(self, cfg: Config, topic: str, batches: list[bytes], trained, ahead: int):
        super().__init__(daemon=True)
        from streams.kafka import make_publisher

        self.pub = make_publisher(cfg.kafka, client="bench-train-stream", run=cfg.run_id)
        self.topic, self.batches, self.trained, self.ahead = topic, batches, trained, ahead
        self.sent, self.stop = 0, threading.Event()

    def run(self) -> None:
        from streams import records

        while not self.stop.is_set():
            if self.sent - self.trained() >= self.ahead:
                time.sleep(0.005)
                continue
            b = records.decode(self.batches[self.sent % len(self.batches)])
            b.batch_id = f"{b.batch_id}-{self.sent}"
            self.pub.send(self.topic, records.encode(b), key=b.batch_id)
            self.sent += 1
            self.pub.flush(30)


def _memory_rate(tr: Any, items: list, steps: int, overlap: bool = True) -> float:
    """Policy steps/s on ``items`` (decoded batches, distinct ids); ``overlap``: the next batch is
    prepared while one trains, as ``Trainer.loop`` does."""
    t0 = time.perf_counter()
    for i in range(steps):
        if overlap:
            tr.preparer.prepare([items[(i + 1) % len(items)]])
        tr.policy_step(items[i % len(items)])
    tr.preparer.clear()
    return steps / (time.perf_counter() - t0)


def bench_train_stream(cfg: Config, starts: list[dict], steps: int = 4, ahead: int = 8) -> dict:
    from models import metrics as M
    from models.train.run import build_trainer
    from streams import records

    cfg = dataclasses.replace(
        cfg,
        trainer=dataclasses.replace(
            cfg.trainer,
            train_world_model=False,
            checkpoint_every=10**9,
            checkpoint_every_s=1e12,
            max_steps=0,
        ),
    )
    import torch

    torch.set_num_threads(cfg.threads)  # as core.process does for the trainer component
    torch.set_flush_denormal(True)  # as core.process does
    raw = _batches(cfg, starts, 4)
    tr = build_trainer(cfg, threading.Event())
    tr.setup()
    try:
        items = []
        for i, r in enumerate(raw):
            b = records.decode(r, expect="training_batch")
            b.batch_id = f"memory-{i}"
            items.append((b, "memory", 0, 0))
        tr.policy_step(items[0])  # warm-up (first-call costs)
        mem_before = _memory_rate(tr, items, steps)
        # the stream: the trainer's own loop, a producer ahead of it
        done: list[float] = []
        orig = tr.policy_step

        def timed(item: tuple) -> bool:
            ok = orig(item)
            if ok:
                done.append(time.perf_counter())
                if len(done) >= WARMUP_STEPS + steps + 1:
                    tr.stop.set()
            return ok

        tr.policy_step = timed  # type: ignore[method-assign]
        feeder = _Feeder(cfg, tr.topics.policy_batches, raw, lambda: len(done), ahead)
        feeder.start()
        idle = M.TRAINER_IDLE.labels(cfg.run_id)

        def run_loop() -> None:
            torch.set_num_threads(cfg.threads)  # a thread's own intra-op setting
            tr.loop()

        loop = threading.Thread(target=run_loop, daemon=True)
        loop.start()
        while len(done) < WARMUP_STEPS + 1 and loop.is_alive():
            time.sleep(0.01)
        idle0 = idle._value.get()
        loop.join()
        idle1 = idle._value.get()
        feeder.stop.set()
        feeder.join(30)
        feeder.pub.close()
        tr.policy_step = orig  # type: ignore[method-assign]
        if len(done) < WARMUP_STEPS + steps + 1:
            raise RuntimeError(f"the trainer trained {len(done)} stream batches, not {steps + 2}")
        trained_from_topic = len(done)
        offset = tr.offsets.get(tr.topics.policy_batches, {}).get(0, 0)
        t = done[WARMUP_STEPS:]
        stream = (len(t) - 1) / (t[-1] - t[0])
        mem_after = _memory_rate(tr, items, steps)
        serial = _memory_rate(tr, items, steps, overlap=False)
    finally:
        tr.close()
    memory = (mem_before + mem_after) / 2
    return {
        "stream_over_synthetic": round(stream / memory, 3),
        "stream_policy_steps_per_s": round(stream, 4),
        "memory_policy_steps_per_s": round(memory, 4),
        "memory_before_after": [round(mem_before, 4), round(mem_after, 4)],
        # the same in-memory steps with the next batch built after, not during, each step
        "memory_serial_policy_steps_per_s": round(serial, 4),
        "prepare_overlap_speedup": round(memory / serial, 3),
        "trainer_idle_s": round(idle1 - idle0, 3),
        "stream_batches_trained": trained_from_topic,
        "stream_batches_published": feeder.sent,
        "trainer_committed_offset": offset,
        "steps": steps,
        "batches_ahead": ahead,
        "batch_trajectories": cfg.stream.batch_trajectories,
        "threads": cfg.threads,
        "model": f"{cfg.model.layers}x{cfg.model.d_model}",
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }


def main(args: Any, cfg: Config, stack_factory: StackFactory, starts: list[dict]) -> dict:
    if not getattr(args, "run_id", None):  # a run of its own, never the user's default run
        cfg.run_id = f"bench-train-stream-{uuid.uuid4().hex[:8]}"
    stack = stack_factory(cfg)
    try:
        stack.up(only=["s3", "broker"])
        steps = max(2, 4 * max(1, int(getattr(args, "rounds", None) or 1)))
        return bench_train_stream(cfg, starts, steps=steps)
    finally:
        if stack.started:
            stack.down(only=stack.started)
