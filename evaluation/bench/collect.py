"""``dynaweb bench collect``: expert collection throughput for 1 and 4 contexts.

Both runs use the same tasks, one Chromium, an in-process task server and the
real publish path: every transition goes through ``streams.kafka.Publisher``
(batched, asynchronous) to a private Tansu broker (memory storage, a free
port, stopped at the end; ``infra.stack.PrivateBroker``, passed in by the
command); after each run the producer is flushed and every
send must have been acknowledged.  Printed: steps/s and episodes/s for 1 and
4 contexts (measured after a short warm-up, so the first page loads do not
count), the 4/1 ratio, and the peak memory: RSS of this process plus every
descendant (Playwright's driver and Chromium's processes; the broker is not
counted), sampled every 0.25 s; RSS double-counts pages shared between
Chromium's processes, so the PSS at the end of each run is given too.

The default tasks are multi-step experts that never pause (``WAIT``), so an
episode restart (~10 ms) does not dominate and no step is a sleep.
The JSON summary is always the last line (``--json``: the only line).
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from collectors.tasks import COLLECT_BENCH_TASKS
from core.config import Config
from evaluation.operations import BrokerFactory

DEFAULT_TASKS = list(COLLECT_BENCH_TASKS)
TARGET_STEPS_4 = 60.0
TARGET_RATIO = 2.5


class MemorySampler:
    """Peak RSS (MB) of this process and its descendants, except ``exclude`` pids."""

    def __init__(self, exclude: set[int] | None = None, every: float = 0.25):
        self.exclude = exclude or set()
        self.every = every
        self.peak_mb = 0.0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def _procs(self) -> list:
        import psutil

        me = psutil.Process()
        out = [me]
        for p in me.children(recursive=True):
            if p.pid not in self.exclude:
                out.append(p)
        return out

    def rss_mb(self) -> float:
        try:
            import psutil
        except ImportError:
            return _proc_rss_mb(os.getpid(), self.exclude)
        total = 0
        for p in self._procs():
            try:
                total += p.memory_info().rss
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                pass
        return total / 2**20

    def pss_mb(self) -> float | None:
        total, ok = 0, False
        for p in self._procs():
            try:
                total += p.memory_full_info().pss
                ok = True
            except Exception:  # noqa: BLE001 - a process that just exited; PSS is extra information
                pass
        return total / 2**20 if ok else None

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self.peak_mb = max(self.peak_mb, self.rss_mb())

    def __enter__(self) -> MemorySampler:
        self.peak_mb = self.rss_mb()
        self._t.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._t.join(2)


def cpu_seconds() -> dict[str, float]:
    """CPU seconds (user + system) so far: this process, Playwright's driver, Chromium."""
    import psutil

    out = {"python": 0.0, "driver": 0.0, "chromium": 0.0}
    me = psutil.Process()
    for p in [me, *me.children(recursive=True)]:
        try:
            t = p.cpu_times()
            name = p.name()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        kind = (
            "python"
            if p.pid == me.pid
            else "chromium"
            if "chrom" in name
            else "driver"
            if "node" in name
            else None
        )
        if kind:
            out[kind] += t.user + t.system
    return out


def _proc_rss_mb(root: int, exclude: set[int]) -> float:
    """Without psutil: walk /proc for the descendants of ``root``."""
    parents: dict[int, int] = {}
    rss: dict[int, int] = {}
    page = os.sysconf("SC_PAGE_SIZE")
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = Path(f"/proc/{d}/stat").read_text()
            fields = stat[stat.rfind(")") + 2 :].split()
            parents[int(d)] = int(fields[1])
            rss[int(d)] = int(Path(f"/proc/{d}/statm").read_text().split()[1]) * page
        except (OSError, ValueError, IndexError):
            continue
    keep, frontier = {root}, [root]
    while frontier:
        p = frontier.pop()
        for c, pp in parents.items():
            if pp == p and c not in keep and c not in exclude:
                keep.add(c)
                frontier.append(c)
    return sum(rss.get(p, 0) for p in keep) / 2**20


async def _phase(
    cfg: Config,
    contexts: int,
    seconds: float,
    browser: Any,
    base_url: str,
    pub: Any,
    topics: Any,
    warmup: float,
    settle_ms: float,
) -> dict:
    from collectors.agents import ExpertAgent
    from collectors.collector import CollectorStats, run_collector

    cfg.collector.contexts = contexts
    cfg.collector.settle_ms = settle_ms
    stats, stop = CollectorStats(), asyncio.Event()
    sent0 = pub.sent
    task = asyncio.ensure_future(
        run_collector(
            cfg,
            pub,
            topics,
            lambda: ExpertAgent(),
            stop,
            collector_id=f"bench-{contexts}",
            base_url=base_url,
            stats=stats,
            seed_offset=0,
            browser=browser,
        )
    )
    t_start = time.perf_counter()
    while stats.steps == 0 and time.perf_counter() - t_start < 30 and not task.done():
        await asyncio.sleep(0.02)
    await asyncio.sleep(warmup)
    s0, e0, t0, c0 = stats.steps, stats.episodes, time.perf_counter(), _cpu()
    await asyncio.sleep(seconds)
    s1, e1, t1, c1 = stats.steps, stats.episodes, time.perf_counter(), _cpu()
    stop.set()
    await task  # raises if the collector failed
    t_flush = time.perf_counter()
    await asyncio.to_thread(pub.flush, 60.0)
    dt = t1 - t0
    lat = sorted(stats.step_latency_s)
    resets = sorted(stats.reset_latency_s)
    cpu_s = sum(c1[k] - c0[k] for k in c0)
    return {
        "contexts": contexts,
        "settle_ms": settle_ms,
        "seconds": round(dt, 2),
        "steps": s1 - s0,
        "episodes": e1 - e0,
        "steps_per_s": round((s1 - s0) / dt, 2),
        "episodes_per_s": round((e1 - e0) / dt, 2),
        "success_rate": round(stats.success_rate(), 4),
        "published": pub.sent - sent0,
        "flush_s": round(time.perf_counter() - t_flush, 3),
        "step_latency_p50_ms": round(1000 * lat[len(lat) // 2], 1) if lat else None,
        # episode resets over the whole run (warm-up included): a page load, and an app task's reset
        "reset_s_p50": round(resets[len(resets) // 2], 3) if resets else None,
        "reset_s_p95": round(resets[min(len(resets) - 1, int(0.95 * len(resets)))], 3)
        if resets
        else None,
        "crashes": stats.crashes,
        "action_errors": stats.action_errors,
        "cpu_ms_per_step": {k: round(1000 * (c1[k] - c0[k]) / max(1, s1 - s0), 2) for k in c0},
        "cores_busy": round(cpu_s / dt, 2) if c0 else None,
    }


def _cpu() -> dict[str, float]:
    try:
        return cpu_seconds()
    except ImportError:  # no psutil: no CPU split
        return {}


def run_bench(
    tasks: list[str] | None = None,
    seconds: float = 10.0,
    contexts: tuple[int, ...] = (1, 4),
    warmup: float | None = None,
    settle_ms: float | None = None,
    *,
    start_broker: BrokerFactory,
) -> dict:
    """The runs of ``contexts`` (each with the settle wait, then again without it) against the
    broker ``start_broker(home)`` makes (``infra.stack.PrivateBroker``); their summary."""
    from collectors.browser import Browser
    from collectors.taskserver import serve
    from core.config import load_config
    from streams.kafka import ensure_topics, make_publisher

    tasks = list(tasks or DEFAULT_TASKS)
    warmup = min(2.0, 0.25 * seconds) if warmup is None else warmup
    with tempfile.TemporaryDirectory(prefix="dynaweb-bench-collect-") as tmp:
        broker = start_broker(Path(tmp))
        bootstrap = broker.start()
        server = None
        try:
            cfg = load_config(
                env={},
                overrides={
                    "home": tmp,
                    "run_id": f"bench-{uuid.uuid4().hex[:8]}",
                    "kafka.bootstrap": bootstrap,
                },
            )
            cfg.collector.tasks = tasks
            cfg.collector.policy = "expert"
            cfg.collector.max_episodes = 0
            settle = float(cfg.collector.settle_ms if settle_ms is None else settle_ms)
            # the runs: each context count with the environment's settle wait, then again without
            # it (observe at once), side by side in one process and one Chromium
            plan = [(n, settle) for n in contexts] + (
                [(n, 0.0) for n in contexts] if settle > 0 else []
            )
            topics = ensure_topics(cfg)
            pub = make_publisher(cfg.kafka, client="bench-collect", run=cfg.run_id)
            server, _, base_url = serve("127.0.0.1", 0)

            async def main() -> dict:
                browser = Browser(headless=True, allowed_origins=[base_url])
                await browser.start()
                out: dict = {}
                try:
                    with MemorySampler(exclude={broker.proc.pid}) as mem:
                        for n, st in plan:
                            r = out[(n, st)] = await _phase(
                                cfg, n, seconds, browser, base_url, pub, topics, warmup, st
                            )
                            r["pss_mb"] = mem.pss_mb()
                            r["pss_mb"] = r["pss_mb"] and round(r["pss_mb"], 1)
                    out["peak_rss_mb"] = round(mem.peak_mb, 1)
                finally:
                    await browser.close()
                return out

            res = asyncio.run(main())
            pub.flush(60)
            acked, sent, errors = pub.acked, pub.sent, pub.errors
            pub.close()
        finally:
            if server is not None:
                server.shutdown()
                server.server_close()
            broker.stop()
    publish = {"published": sent, "acked": acked, "publish_errors": errors}
    summary = summarize(res, plan, settle, publish, tasks, seconds)
    if acked != sent or errors:
        raise RuntimeError(f"publish incomplete: {acked}/{sent} acknowledged, {errors} errors")
    return summary


def summarize(
    res: dict, plan: list, settle: float, publish: dict, tasks: list[str], seconds: float
) -> dict:
    """The bench's summary from the runs (``res``: (contexts, settle ms) -> figures, and
    ``peak_rss_mb``) and the producer's counts (``publish``)."""
    one, four = res.get((1, settle), {}), res.get((4, settle), {})
    ratio = _ratio(four, one)
    raw1, raw4 = res.get((1, 0.0), {}), res.get((4, 0.0), {})
    return {
        "steps_per_s_1": one.get("steps_per_s"),
        "steps_per_s_4": four.get("steps_per_s"),
        "episodes_per_s_1": one.get("episodes_per_s"),
        "episodes_per_s_4": four.get("episodes_per_s"),
        "ratio_4_1": ratio,
        "peak_rss_mb": res["peak_rss_mb"],
        "pss_mb_4": four.get("pss_mb"),
        "settle_ms": settle,
        "cores_busy_1": one.get("cores_busy"),
        "reset_s_p50_1": one.get("reset_s_p50"),
        "reset_s_p95_1": one.get("reset_s_p95"),
        "reset_s_p50_4": four.get("reset_s_p50"),
        "reset_s_p95_4": four.get("reset_s_p95"),
        # the same without the settle wait: what the CPU allows (one context then keeps most of the
        # two cores busy, so the 4/1 ratio cannot exceed 2 / cores_busy_1)
        "no_settle": {
            "steps_per_s_1": raw1.get("steps_per_s"),
            "steps_per_s_4": raw4.get("steps_per_s"),
            "ratio_4_1": _ratio(raw4, raw1),
            "cores_busy_1": raw1.get("cores_busy"),
        }
        if settle > 0
        else None,
        **publish,
        "tasks": tasks,
        "seconds": seconds,
        "cpus": os.cpu_count(),
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "targets": {"steps_per_s_4": TARGET_STEPS_4, "ratio_4_1": TARGET_RATIO},
        "meets_targets": bool(
            four and four["steps_per_s"] >= TARGET_STEPS_4 and (ratio or 0) >= TARGET_RATIO
        ),
        "runs": [res[k] for k in plan],
    }


def _ratio(a: dict, b: dict) -> float | None:
    return (
        round(a["steps_per_s"] / b["steps_per_s"], 2)
        if a.get("steps_per_s") and b.get("steps_per_s")
        else None
    )


def format_summary(s: dict) -> str:
    lines = [
        f"expert collection on {', '.join(s['tasks'])} ({s['seconds']:g} s per run, "
        f"{s['cpus']} CPUs, load {s['load_avg_1m']})"
    ]
    for r in s["runs"]:
        lines.append(
            f"  {r['contexts']} context(s), settle {r['settle_ms']:g} ms: {r['steps_per_s']:7.1f} steps/s "
            f"{r['episodes_per_s']:6.1f} episodes/s  success {r['success_rate']:.0%}  p50 step "
            f"{r['step_latency_p50_ms']} ms  cores busy {r['cores_busy']}  PSS {r['pss_mb']} MB"
        )
    lines.append(
        f"  4/1 ratio {s['ratio_4_1']} (settle {s['settle_ms']:g} ms)  peak RSS {s['peak_rss_mb']} MB  "
        f"published {s['published']} (all acknowledged)  targets {'met' if s['meets_targets'] else 'MISSED'} "
        f"(>= {TARGET_STEPS_4:g} steps/s with 4, ratio >= {TARGET_RATIO})"
    )
    if s.get("no_settle"):
        n = s["no_settle"]
        lines.append(
            f"  without the settle wait: {n['steps_per_s_1']} / {n['steps_per_s_4']} steps/s with 1 / 4, "
            f"ratio {n['ratio_4_1']}; one context keeps {n['cores_busy_1']} of {s['cpus']} cores busy"
        )
    return "\n".join(lines)


def main(args: Any, cfg: Config | None = None, *, start_broker: BrokerFactory) -> int:  # noqa: ARG001 - the bench makes its own broker and config
    raw = getattr(args, "tasks", None) or []
    raw = [raw] if isinstance(raw, str) else raw
    tasks = [t.strip() for x in raw for t in x.split(",") if t.strip()] or None
    seconds = float(getattr(args, "seconds", None) or 10.0)
    settle = getattr(args, "settle_ms", None)
    s = run_bench(
        tasks,
        seconds,
        settle_ms=None if settle is None else float(settle),
        start_broker=start_broker,
    )
    if not getattr(args, "json", False):
        print(format_summary(s))
    print(json.dumps(s))
    return 0
