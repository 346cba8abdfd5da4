"""``dynaweb bench streams``: the stream worker against a raw consumer, on a
broker of its own.

1. Throughput: N transitions (``obs`` and ``next_obs`` trees of ``obs_bytes``
   each; a mix of expert, real and dream episodes of ``STEPS`` steps, dreams
   in groups of ``G`` keyed by group id) are produced first. A raw
   kafka-python consumer and a raw aiokafka consumer (the worker's client
   library) read them from the beginning; then a worker process
   (``python -m streams.worker``) processes them. The worker's rate is taken
   from the first message it processed to the moment the output of the last
   one (batches, forwarded transitions) was handed to its producer (its
   ``state.json``: ``first_at``, ``done_at``).
2. Latency: with the worker running, new episodes are produced at half the
   measured worker rate (or half the producer's rate of step 1 when that is
   lower: a producer at its limit queues records itself); for every mixed batch, the time from the last
   transition of its trajectories being produced to the batch being emitted
   (the batch record's timestamp).

The broker: Tansu with memory storage (``infra.stack.PrivateBroker``), or with
s3 storage on a private SeaweedFS (``infra.stack.Stack`` in a temporary home on
free ports); both are passed in by the command (``evaluation.operations``) and
stopped at the end. The JSON summary is the last line of the output.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from core.config import Config, load_config
from core.net import free_port_block
from core.waiting import wait_until
from evaluation.operations import BrokerFactory, StackFactory
from streams import kafka as sk
from streams import records
from streams.records import Transition
from streams.topics import Topics

ROOT = Path(__file__).resolve().parents[2]
STEPS, G = 5, 8
MIX = {"expert": 0.2, "real": 0.2, "dream": 0.6}


class Broker:
    """A private broker: Tansu (memory) or a Stack (s3 + broker with s3 storage) on free ports."""

    def __init__(
        self, storage: str, home: Path, start_broker: BrokerFactory, stack_factory: StackFactory
    ):
        self.storage, self.home = storage, home
        self.start_broker, self.stack_factory = start_broker, stack_factory
        self.tansu = self.stack = None

    def start(self) -> Config:
        if self.storage == "memory":
            self.tansu = self.start_broker(self.home)
            bootstrap = self.tansu.start()
            return load_config(
                env={}, overrides={"home": str(self.home), "kafka.bootstrap": bootstrap}
            )
        s3, broker, prom, task = free_port_block(4)
        aux = free_port_block(5)[0]  # SeaweedFS also binds each of these + 10000 (gRPC)
        cfg = load_config(
            env={},
            overrides={
                "home": str(self.home),
                "stack.broker_storage": "s3",
                "stack.s3_port": s3,
                "s3.endpoint": f"127.0.0.1:{s3}",
                "stack.broker_port": broker,
                "kafka.bootstrap": f"127.0.0.1:{broker}",
                "stack.prometheus_port": prom,
                "stack.taskserver_port": task,
                "stack.s3_aux_port_base": aux,
            },
        )
        self.stack = self.stack_factory(cfg)
        self.stack.up(["s3", "broker"])
        return cfg

    def pids(self) -> list[int]:
        """The broker's processes (Tansu; with s3 storage, SeaweedFS too)."""
        if self.tansu is not None:
            return [self.tansu.proc.pid] if self.tansu.proc is not None else []
        pids = [self.stack.pid(n) for n in ("broker", "s3")] if self.stack is not None else []
        return [p for p in pids if p]

    def stop(self) -> None:
        if self.tansu is not None:
            self.tansu.stop()
        if self.stack is not None:
            self.stack.down()


def episodes(
    run: str, n_transitions: int, obs_bytes: int, rng: random.Random, prefix: str = ""
) -> list[list[Transition]]:
    """Whole groups of G episodes (experts alone), about ``n_transitions`` in all, mixed by MIX."""
    pad = "x" * obs_bytes
    out = []
    per_group = G * STEPS
    counts = {s: max(1, round(n_transitions * f / per_group)) for s, f in MIX.items()}
    for source, n_groups in counts.items():
        for _g in range(n_groups):
            gid = f"g-{uuid.uuid4().hex[:10]}" if source == "dream" else ""
            seed = rng.randrange(1 << 30)
            for _ in range(G):
                ep = f"{prefix}{source[0]}-{uuid.uuid4().hex[:14]}"
                out.append(
                    [
                        Transition(
                            run_id=run,
                            episode_id=ep,
                            step=i,
                            task="miniwob/click-button",
                            seed=seed,
                            source=source,
                            policy_version=0,
                            world_model_version=0,
                            obs={"instruction": "click", "tree": f"p{i} {pad}"},
                            action="click(3)",
                            next_obs={"instruction": "click", "tree": f"p{i + 1} {pad}"},
                            reward=1.0 if i == STEPS - 1 else 0.0,
                            done=i == STEPS - 1,
                            group_id=gid,
                            producer_id="bench",
                        )
                        for i in range(STEPS)
                    ]
                )
    return out


def produce(cfg: Config, topics: Topics, eps: list, rate: float = 0.0) -> int:
    """Round robin over the episodes of each group (so they are in progress together)."""
    p = sk.make_producer(cfg.kafka, linger_ms=5)
    n, t0 = 0, time.time()
    try:
        for k in range(0, len(eps), G):
            group = eps[k : k + G]
            for i in range(STEPS):
                for ep in group:
                    t = ep[i]
                    t.created_at = time.time()
                    key = (t.group_id or t.episode_id).encode()
                    p.send(topics.name(t.source), value=records.encode(t), key=key)
                    n += 1
                    if rate and n % 50 == 0:
                        ahead = n / rate - (time.time() - t0)
                        if ahead > 0:
                            time.sleep(ahead)
        p.flush()
    finally:
        p.close()
    return n


def raw_kafka_python(cfg: Config, topics: list[str], n: int) -> float:
    from kafka import TopicPartition

    c = sk.make_consumer(cfg.kafka, max_poll_records=2000)
    tps = [TopicPartition(t, p) for t in topics for p in sorted(c.partitions_for_topic(t) or {0})]
    c.assign(tps)
    c.seek_to_beginning(*tps)
    got, t0 = 0, time.time()
    while got < n:
        for msgs in c.poll(timeout_ms=500).values():
            got += sum(1 for m in msgs if m.value and not sk.is_control(m.value))
        if time.time() - t0 > 600:
            raise TimeoutError("raw kafka-python consumer too slow")
    dt = time.time() - t0
    c.close()
    return n / dt


def raw_crc32c() -> str:
    """How kafka-python computes CRC-32C here: "c" (the ``crc32c`` package) or "python"."""
    from kafka.record import util

    return "c" if getattr(util, "crc32c_c", None) is not None else "python"


def raw_aiokafka(cfg: Config, topics: list[str], n: int) -> float:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def run() -> float:
        c = AIOKafkaConsumer(
            bootstrap_servers=cfg.kafka.bootstrap,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            max_partition_fetch_bytes=cfg.kafka.max_message_bytes,
        )
        await c.start()
        try:
            tps = [
                TopicPartition(t, p)
                for t in topics
                for p in sorted(c.partitions_for_topic(t) or {0})
            ]
            c.assign(tps)
            await c.seek_to_beginning(*tps)
            got, t0 = 0, time.time()
            while got < n:
                for msgs in (await c.getmany(timeout_ms=500, max_records=2000)).values():
                    got += sum(1 for m in msgs if m.value and not sk.is_control(m.value))
            return n / (time.time() - t0)
        finally:
            await c.stop()

    return asyncio.run(run())


class WorkerProc:
    def __init__(self, cfg: Config, home: Path):
        self.dir = home / "streams" / cfg.run_id / "bench-worker"
        env = {k: v for k, v in os.environ.items() if not k.startswith("DYNAWEB_")}
        env.update(
            {
                "DYNAWEB_HOME": str(home),
                "DYNAWEB_RUN_ID": cfg.run_id,
                "PYTHONPATH": str(ROOT),
                "DYNAWEB_KAFKA__BOOTSTRAP": cfg.kafka.bootstrap,
                "DYNAWEB_STREAM__WORKER_ID": "bench-worker",
                "DYNAWEB_STREAM__HELDOUT_FRACTION": "0.1",
                "DYNAWEB_STREAM__GROUP_SIZE": str(G),
                "DYNAWEB_STREAM__BATCH_TRAJECTORIES": str(2 * G),
                "DYNAWEB_STREAM__SAMPLES_PER_INSERT": "0",
                "DYNAWEB_STREAM__COLD_START_BATCH_S": "3600",
                "DYNAWEB_STREAM__LAG_BOUND": "1000000000",
            }
        )
        self.log = open(home / "worker.log", "wb")
        cmd = os.environ.get(
            "DYNAWEB_BENCH_WORKER_CMD", "-m streams.worker"
        ).split()  # e.g. under cProfile
        self.proc = subprocess.Popen(
            [sys.executable, *cmd, "--loglevel", "warning"],
            cwd=ROOT,
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )

    def state(self) -> dict | None:
        if self.proc.poll() is not None:
            raise RuntimeError(f"stream worker exited {self.proc.returncode}")
        try:
            return json.loads((self.dir / "state.json").read_text())
        except (OSError, ValueError):
            return None

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.log.close()


def latencies(cfg: Config, topic: str, want: int, timeout: float) -> list[float]:
    """Batch timestamp - the newest ``last_produced_at`` of its non-expert trajectories."""
    from kafka import TopicPartition

    c = sk.make_consumer(cfg.kafka)
    tp = TopicPartition(topic, 0)
    c.assign([tp])
    c.seek_to_beginning(tp)
    out: list[float] = []
    deadline = time.time() + timeout
    while len(out) < want and time.time() < deadline:
        for msgs in c.poll(timeout_ms=300).values():
            for m in msgs:
                if not m.value or sk.is_control(m.value):
                    continue
                d = json.loads(m.value)
                last = [
                    t["last_produced_at"]
                    for t in d["trajectories"]
                    if t["source"] != "expert" and t["episode_id"].startswith("L")
                ]
                if d["kind"] == "mixed" and last:
                    out.append(m.timestamp / 1000.0 - max(last))
    c.close()
    return out


def cpu_seconds(who: dict[str, list[int]]) -> dict[str, float]:
    """CPU seconds (user + system) so far of each named group of processes (gone ones: 0)."""
    import psutil

    out = {}
    for name, pids in who.items():
        total = 0.0
        for pid in pids:
            try:
                t = psutil.Process(pid).cpu_times()
                total += t.user + t.system
            except psutil.Error:
                pass
        out[name] = total
    return out


def _pct(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(q * len(xs)))], 4)


def latency_phase(
    cfg: Config, topics: Topics, worker: WorkerProc, broker: Broker, rate: float,
    latency_s: float, obs_bytes: int, rng: random.Random,
) -> tuple[list[float], int, dict]:  # fmt: skip
    """New (non-expert) episodes produced at ``rate`` for ``latency_s``: the batch latencies, the
    batches expected, and the cores each process used meanwhile (the worker, the broker and this
    process, the bench's producer, share the machine)."""
    lat_eps = episodes(cfg.run_id, int(rate * latency_s), obs_bytes, rng, prefix="L")
    lat_eps = [e for e in lat_eps if e[0].source != "expert"]  # the pool is already full
    want = sum(1 for e in lat_eps[::G])
    who = {"worker": [worker.proc.pid], "broker": broker.pids(), "bench_producer": [os.getpid()]}
    cpu0, t_lat = cpu_seconds(who), time.time()
    produce(cfg, topics, lat_eps, rate=rate)
    span_lat = max(1e-6, time.time() - t_lat)
    cores = {k: round((v - cpu0[k]) / span_lat, 2) for k, v in cpu_seconds(who).items()}
    cores["total"] = round(sum(cores.values()), 2)
    return latencies(cfg, topics.policy_batches, want, timeout=60 + latency_s), want, cores


def run_bench(
    storage: str = "memory",
    n: int = 60_000,
    obs_bytes: int = 1024,
    latency_s: float = 10.0,
    log=print,
    latency_rate: float = 0.0,
    *,
    start_broker: BrokerFactory,
    stack_factory: StackFactory,
) -> dict:
    """The measurements against a broker of its own: ``start_broker(home)`` for memory storage
    (``infra.stack.PrivateBroker``), ``stack_factory(cfg)`` for s3 (``infra.stack.Stack``)."""
    home = Path(tempfile.mkdtemp(prefix="dynaweb-bench-"))
    broker = Broker(storage, home, start_broker, stack_factory)
    worker = None
    try:
        cfg = broker.start()
        cfg.run_id = f"bench-{uuid.uuid4().hex[:8]}"
        topics = sk.ensure_topics(cfg)
        rng = random.Random(0)
        eps = episodes(cfg.run_id, n, obs_bytes, rng)
        mix = {s: sum(len(e) for e in eps if e[0].source == s) for s in MIX}
        t0 = time.time()
        n = produce(cfg, topics, eps)
        produce_tps = n / (time.time() - t0)
        msg_bytes = len(records.encode(eps[0][0]))
        log(
            f"produced {n} transitions ({msg_bytes} B each) at {produce_tps:,.0f}/s on {storage} storage"
        )
        raw = raw_kafka_python(cfg, topics.transitions, n)
        raw_aio = raw_aiokafka(cfg, topics.transitions, n)
        log(f"raw kafka-python consumer {raw:,.0f}/s, raw aiokafka consumer {raw_aio:,.0f}/s")
        t_start = time.time()
        worker = WorkerProc(cfg, home)
        st = wait_until(
            lambda: (s := worker.state()) and s.get("processed", 0) >= n and s,
            900,
            "the worker to process everything",
            0.2,
        )
        # until the output of the last message was handed to the producer (``done_at``)
        st = wait_until(
            lambda: (s := worker.state()) and (s.get("done_at") or 0) >= s["last_at"] and s,
            60,
            "the worker's output of the last messages",
            0.2,
        )
        span = max(1e-6, st["done_at"] - st["first_at"])
        worker_tps = n / span
        log(
            f"worker {worker_tps:,.0f}/s ({span:.1f}s from its first message to the output of "
            f"its last; {time.time() - t_start:.1f}s including start-up)"
        )
        # latency at half the worker's rate, or of the bench's producer when that is slower
        # (beyond it the producer's own queue, not the worker, would make the latency)
        rate = latency_rate or min(worker_tps, produce_tps) / 2
        lats, want, cores = latency_phase(
            cfg, topics, worker, broker, rate, latency_s, obs_bytes, rng
        )
        log(
            f"latency over {len(lats)} batches at {rate:,.0f} transitions/s: p50 {_pct(lats, 0.5)}s "
            f"p95 {_pct(lats, 0.95)}s; cores used meanwhile {cores} of {os.cpu_count()}"
        )
        final = worker.state() or st
        return {
            "storage": storage,
            "n": n,
            "msg_bytes": msg_bytes,
            "obs_bytes": obs_bytes,
            "input_mix": mix,
            "steps_per_episode": STEPS,
            "group_size": G,
            "produce_tps": round(produce_tps),
            "raw_tps": round(raw),
            # kafka-python checks each batch's CRC-32C in pure Python unless the optional `crc32c`
            # package is installed (it is not a dependency): with it, the raw consumer read 97k/s
            # against 48-62k/s without (docs/results/performance, at `d027775`)
            "raw_crc32c": raw_crc32c(),
            "raw_aiokafka_tps": round(raw_aio),
            "worker_tps": round(worker_tps),
            "worker_vs_raw": round(worker_tps / raw, 3),
            "worker_vs_raw_aiokafka": round(worker_tps / raw_aio, 3),
            "latency_rate_tps": round(rate),
            "latency_batches": len(lats),
            "latency_expected_batches": want,
            "latency_p50_s": _pct(lats, 0.5),
            "latency_p95_s": _pct(lats, 0.95),
            "latency_cores": cores,
            "batches": final.get("produced"),
            "duplicates": final.get("duplicates"),
            "load_avg_1m": round(os.getloadavg()[0], 2),
            "cpus": os.cpu_count(),
        }
    finally:
        if worker is not None:
            worker.stop()
        broker.stop()
        shutil.rmtree(home, ignore_errors=True)


def main(
    args: Any,
    cfg: Config | None = None,  # noqa: ARG001 - the bench makes its own broker and config
    *,
    start_broker: BrokerFactory,
    stack_factory: StackFactory,
) -> int:
    """``dynaweb bench streams`` with the CLI's options (``--storage``, ``--n``, ``--obs-bytes``,
    ``--latency-rate``, ``--json``: only the JSON summary)."""
    res = run_bench(
        args.storage,
        args.n,
        args.obs_bytes,
        log=(lambda *_: None) if args.json else print,
        latency_rate=args.latency_rate,
        start_broker=start_broker,
        stack_factory=stack_factory,
    )
    print(json.dumps(res))
    return 0
