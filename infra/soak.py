"""What ``dynaweb chaos`` watches while it injects faults, and the report it makes of it.

``Watch`` samples the running loop every ``sample_s`` from its own thread: every component's
memory (the resident set of its process and all its descendants, read from ``/proc``: a
collector's Chromium included), the processes seen per component (restarts), the components' counters summed
over restarts (``infra.up.CounterTotals``: records acknowledged per topic, steps) and the
trainer's checkpoint version.  ``topic_check`` compares, per topic, what the components'
publishers had acknowledged (``dynaweb_client_acked_records``) with the distinct records an
independent reader finds there; ``report`` turns it all into the soak's figures.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections import defaultdict

from core.config import Config
from core.metrics import run_targets, scrape_targets
from core.proctree import tree_cpu_s, tree_rss
from infra.up import CounterTotals
from streams.kafka import read_until_sentinel

MB = 1024 * 1024


def stable_id(labels: dict) -> str:
    """A component's id across restarts: ``component_id`` without a trailing ``-<pid>`` (the
    default id of a process is ``<component>-<host>-<pid>``)."""
    cid, pid = labels["component_id"], labels.get("pid", "")
    return cid[: -len(pid) - 1] if pid and cid.endswith("-" + pid) else cid


def slope_per_h(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of (seconds, value) points, per hour; None under 4 points."""
    if len(points) < 4:
        return None
    n = len(points)
    mt = sum(t for t, _ in points) / n
    mv = sum(v for _, v in points) / n
    var = sum((t - mt) ** 2 for t, _ in points)
    if var == 0:
        return None
    return 3600 * sum((t - mt) * (v - mv) for t, v in points) / var


SLOPE_WINDOW_S = 2400.0  # the memory check's window: the run's last 40 minutes
SLOPE_LIMIT_MB_PER_H = 50.0  # a component's resident memory may grow at most this fast there
SLOPE_MIN_S = 1200.0  # judged only over at least 20 minutes of one process (else None)


def window_slope(
    points: list[tuple[float, int, int]],
    end: float,
    window_s: float = SLOPE_WINDOW_S,
    min_s: float = SLOPE_MIN_S,
) -> tuple[float | None, float]:
    """MB per hour of a component's resident memory over the ``window_s`` before ``end``: the
    least-squares slope of the process that lived longest in that window (a restart starts a new
    process, whose level says nothing about the old one's growth), and the seconds it covers.
    None when that process covers less than ``min_s`` of the window."""
    by_pid: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for t, pid, rss in points:
        if end - window_s <= t <= end:
            by_pid[pid].append((t, rss / MB))
    if not by_pid:
        return None, 0.0
    pts = max(by_pid.values(), key=lambda p: p[-1][0] - p[0][0])
    covered = pts[-1][0] - pts[0][0]
    if covered < min_s:
        return None, covered
    return slope_per_h(pts), covered


class Watch:
    """Samples the loop of ``cfg`` every ``sample_s`` until ``stop``."""

    def __init__(self, cfg: Config, sample_s: float = 15.0):
        self.cfg, self.sample_s = cfg, sample_s
        self.totals = CounterTotals()
        self.memory: dict[str, list[tuple[float, int, int]]] = defaultdict(list)  # (t, pid, rss)
        self.pids: dict[str, list[int]] = defaultdict(list)  # component_id -> pids in order
        self.versions: list[tuple[float, float]] = []  # (t, trainer policy version)
        self.load: list[float] = []  # the machine's 1-minute load average at each sample
        self.cpu: dict[str, dict[int, list[float]]] = defaultdict(
            dict
        )  # cid -> pid -> [first, last]
        self.last: dict[tuple, float] = {}  # (name, labels) -> total at the last sample
        self.started = time.time()
        self.last_sample: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-watch", daemon=True)
        self._lock = threading.Lock()

    def start(self) -> Watch:
        self.sample()  # every component's first process is seen before the first fault kills it
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        self.sample()  # the final totals

    def _run(self) -> None:
        while not self._stop.wait(self.sample_s):
            self.sample()

    def sample(self) -> None:
        now = self.last_sample = time.time()
        self.load.append(os.getloadavg()[0])
        for _f, entry in run_targets(self.cfg):
            cid, pid = stable_id(entry["labels"]), int(entry["labels"]["pid"])
            if pid not in self.pids[cid]:
                self.pids[cid].append(pid)
            rss = tree_rss(pid)
            if rss:
                self.memory[cid].append((now, pid, rss))
                cpu = tree_cpu_s(pid)
                self.cpu[cid].setdefault(pid, [cpu, cpu])[1] = cpu
        samples = self.totals.samples(scrape_targets(self.cfg))
        with self._lock:
            for name, labels, value in samples:
                if name.endswith("_total"):
                    self.last[(name, tuple(sorted(labels.items())))] = value
            version = [
                v
                for name, labels, v in samples
                if name == "dynaweb_trainer_checkpoint_version" and labels.get("kind") == "policy"
            ]
            if version:
                self.versions.append((now, max(version)))

    def total(self, name: str, by: str | None = None) -> dict[str, float]:
        """A counter's total over the run (restarts included), by one label (or ``all``)."""
        out: dict[str, float] = defaultdict(float)
        with self._lock:
            for (n, labels), v in self.last.items():
                if n == name:
                    out[dict(labels).get(by, "?") if by else "all"] += v
        return dict(out)

    def load_report(self) -> dict:
        """The machine's 1-minute load average over the samples (other work shares the CPUs)."""
        if not self.load:
            return {"mean": None, "max": None}
        return {"mean": round(sum(self.load) / len(self.load), 2), "max": round(max(self.load), 2)}

    def cpu_report(self) -> dict:
        """How the cores were shared: per component, the cores its process tree kept busy on
        average between the first and the last sample (every process of it, restarts included),
        and the components together against the machine's cores."""
        wall = max(1e-9, (self.last_sample or self.started) - self.started)
        per = {
            cid: round(sum(b - a for a, b in pids.values()) / wall, 3)
            for cid, pids in sorted(self.cpu.items())
        }
        return {
            "cores": per,
            "components_total": round(sum(per.values()), 3),
            "machine_cores": os.cpu_count(),
            "over_s": round(wall),
        }

    def restarts(self) -> dict[str, int]:
        return {cid: len(pids) - 1 for cid, pids in sorted(self.pids.items())}

    def memory_report(self, settle_s: float = 300.0) -> dict[str, dict]:
        """Per component: first, last and largest resident MB, and the growth in MB per hour of
        its longest-lived process after ``settle_s`` of that process's life."""
        out = {}
        for cid, pts in sorted(self.memory.items()):
            by_pid: dict[int, list[tuple[float, int]]] = defaultdict(list)
            for t, pid, rss in pts:
                by_pid[pid].append((t, rss))
            longest = max(by_pid.values(), key=lambda p: p[-1][0] - p[0][0])
            born = longest[0][0]
            settled = [(t, rss / MB) for t, rss in longest if t - born >= settle_s]
            growth = slope_per_h(settled)
            # the same over the second half of that window: a leak keeps its slope, warm-up
            # (allocator arenas, caches filling) flattens out
            late = (
                [p for p in settled if p[0] >= (settled[0][0] + settled[-1][0]) / 2]
                if settled
                else []
            )
            late_growth = slope_per_h(late)
            end = self.last_sample if self.last_sample is not None else pts[-1][0]
            last40, covered = window_slope(pts, end)
            out[cid] = {
                # the check: growth over the run's last 40 minutes under 50 MB/h (None: not
                # judged, its process covered under 20 minutes of them)
                "slope_mb_per_h_last_40m": None if last40 is None else round(last40, 1),
                "slope_over_s": round(covered),
                "slope_ok": None if last40 is None else last40 < SLOPE_LIMIT_MB_PER_H,
                "first_mb": round(pts[0][2] / MB, 1),
                "last_mb": round(pts[-1][2] / MB, 1),
                "max_mb": round(max(r for _t, _p, r in pts) / MB, 1),
                "growth_mb_per_h": None if growth is None else round(growth, 1),
                "growth_mb_per_h_second_half": None
                if late_growth is None
                else round(late_growth, 1),
                "measured_over_s": round(settled[-1][0] - settled[0][0]) if settled else 0,
            }
        return out

    def checkpoint_report(self) -> dict:
        """First and last trainer policy version seen, and the longest time without a new one."""
        if not self.versions:
            return {"first_version": None, "last_version": None, "longest_gap_s": None}
        gap, last_change = 0.0, self.versions[0][0]
        prev = self.versions[0][1]
        for t, v in self.versions[1:]:
            if v != prev:
                gap, last_change, prev = max(gap, t - last_change), t, v
        gap = max(gap, self.versions[-1][0] - last_change)
        return {
            "first_version": int(self.versions[0][1]),
            "last_version": int(self.versions[-1][1]),
            "longest_gap_s": round(gap),
        }


def topic_check(cfg: Config, acked: dict[str, float], timeout_s: float = 600.0) -> dict:
    """Per topic with acknowledged records: acknowledged, read, distinct, and whether every
    acknowledged record can be there (distinct >= acknowledged; records are told apart by their
    bytes, so a re-sent duplicate counts once)."""
    out = {}
    for topic, n_acked in sorted(acked.items()):
        if topic == "?":
            continue
        seen: set[bytes] = set()
        read = 0
        t0 = time.time()
        for _m, raw in read_until_sentinel(cfg.kafka, topic, cfg.run_id, timeout_s):
            read += 1
            seen.add(hashlib.blake2b(raw, digest_size=12).digest())
        out[topic] = {
            "acked": int(n_acked),
            "read": read,
            "distinct": len(seen),
            "complete": len(seen) >= n_acked,
            "read_s": round(time.time() - t0, 1),
        }
    return out


def render(rep: dict) -> str:
    """The soak's report as the table docs/reliability.md publishes."""
    lines = [f"soak of run {rep['run']}: {rep['duration_s']} s, {len(rep['faults'])} faults"]
    lines.append(f"  {'fault':20s} {'outage s':>9s} {'recovery s':>11s}  ok")
    for e in rep["faults"]:
        rec = "-" if e["recovery_s"] is None else f"{e['recovery_s']:.1f}"
        lines.append(f"  {e['fault']:20s} {e['outage_s']:9.1f} {rec:>11s}  {e['ok']}")
    p = {k: ("-" if v is None else v) for k, v in rep["probe"].items()}
    lines.append(
        f"probe: sent {p['sent']}, acknowledged {p['acked']}, found {p['found']}, missing "
        f"{p['missing']}, duplicates {p['duplicates']}, re-sent {p['resent']}, producer "
        f"rebuilds {p['rebuilds']}"
    )
    lines.append(f"  {'topic':44s} {'acked':>8s} {'read':>8s} {'distinct':>9s}  complete")
    for name, t in rep["topics"].items():
        lines.append(
            f"  {name:44s} {t['acked']:8d} {t['read']:8d} {t['distinct']:9d}  {t['complete']}"
        )
    lines.append(
        f"  {'component':40s} {'first MB':>9s} {'last MB':>8s} {'max MB':>7s} {'MB/h':>6s} "
        f"{'late MB/h':>9s} {'last 40m MB/h':>13s} restarts"
    )
    for cid, m in rep["memory"].items():
        g = "-" if m["growth_mb_per_h"] is None else f"{m['growth_mb_per_h']:.1f}"
        late = m.get("growth_mb_per_h_second_half")
        gl = "-" if late is None else f"{late:.1f}"
        s40 = m.get("slope_mb_per_h_last_40m")
        s40 = "-" if s40 is None else f"{s40:.1f}" + ("" if m.get("slope_ok") else " (!)")
        lines.append(
            f"  {cid:40s} {m['first_mb']:9.1f} {m['last_mb']:8.1f} {m['max_mb']:7.1f} {g:>6s} "
            f"{gl:>9s} {s40:>13s} {rep['restarts'].get(cid, 0)}"
        )
    c = rep["checkpoints"]
    lines.append(
        f"checkpoints: v{c['first_version']} -> v{c['last_version']}, longest without a new "
        f"one {c['longest_gap_s']} s; progress {rep['progress']}"
    )
    for err in rep.get("read_errors", []):
        lines.append(f"read error: {err}")
    if rep.get("cpu"):
        cores = ", ".join(f"{k} {v}" for k, v in rep["cpu"]["cores"].items())
        lines.append(
            f"cores busy: {cores} (components {rep['cpu']['components_total']} of "
            f"{rep['cpu']['machine_cores']})"
        )
    if rep.get("load"):
        lines.append(f"load average (1 min): mean {rep['load']['mean']}, max {rep['load']['max']}")
    return "\n".join(lines)
