"""``dynaweb up``: the stack plus one of each component, supervised.

Components run as child processes (``python -m infra.cli <command>``, supervised
by ``core.supervise.Supervisor``) with the resolved config in
``HOME/runs/<run>/config.json`` (secrets stay in the environment / credentials
file).  A crashed component is restarted with back-off; progress is read from
the components' own metrics endpoints (found through the Prometheus
file-discovery targets: ``core.metrics.scrape_targets``), so it works even with
Prometheus down.  A restarted component counts from 0 again in a new process, so
the counters are summed by ``CounterTotals``, which keeps every process's last
value (totals survive restarts).  Ctrl-C or ``--duration`` stops everything
cleanly, the components' targets removed with them.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from collections import deque

from prometheus_client.parser import text_string_to_metric_families

from core.config import Config
from core.metrics import scrape_targets
from core.supervise import Supervisor
from infra.stack import OPTIONAL, Stack, StackError


def _collect(policy: str, contexts: int, cid: str, setting: str) -> list[str]:
    return [
        "collect",
        "--policy",
        policy,
        "--contexts",
        str(contexts),
        "--id",
        cid,
        "--set",
        setting,
    ]


def component_argv(cfg: Config) -> dict[str, list[str]]:
    up, run = cfg.up, cfg.run_id
    comps = {"stream-worker": ["stream-worker"], "trainer": ["train"]}
    for i in range(up.dreamers):
        comps[f"dream-{i}"] = ["dream"]
    expert_rate = f"collector.max_steps_per_s={up.expert_steps_per_s}"
    comps["collector-expert"] = _collect(
        "expert", up.expert_contexts, f"collector-expert-{run}", expert_rate
    )
    for i in range(up.perturbed_collectors):
        comps[f"collector-perturbed-{i}"] = _collect(
            "perturbed", 1, f"collector-perturbed-{i}-{run}", expert_rate
        )
    if up.app_tasks:  # the web-application suite's expert, beside MiniWoB++'s
        comps["collector-app"] = _collect("expert", 1, f"collector-app-{run}", expert_rate) + [
            "--set",
            f"collector.tasks={json.dumps(list(up.app_tasks))}",
        ]
    if cfg.gate.enabled:  # candidates become LATEST only through the gate's probes
        comps["gate"] = ["gate"]
    pacing = f"collector.groups_per_version={up.policy_groups_per_version}"
    for i in range(up.policy_collectors):
        comps[f"collector-latest-{i}"] = _collect(
            "latest", 1, f"collector-latest-{i}-{run}", pacing
        )
    return comps


class CounterTotals:
    """Counters of a run summed over every process this reader has seen.  A restarted component
    counts from 0 in a new process (a new target), so a target that disappeared keeps contributing
    the last values it reported, and a counter that goes down within one target (a reset) adds the
    value it had before, as Prometheus' ``increase()`` does for one series.  Gauges are read from
    the live targets only."""

    def __init__(self) -> None:
        self.last: dict[tuple, float] = {}  # (target, name, labels) -> last value seen
        self.base: dict[tuple, float] = {}  # ... -> sum of the values seen before resets

    def samples(self, scraped: list[tuple[dict, str]]) -> list[tuple[str, dict, float]]:
        """(name, labels, value) of every gauge of the live targets and every counter total."""
        out = []
        for target, text in scraped:
            tid = tuple(target.get(k, "") for k in ("component_id", "pid", "registered_at"))
            for fam in text_string_to_metric_families(text):
                for smp in fam.samples:
                    if fam.type != "counter" or not smp.name.endswith("_total"):
                        out.append((smp.name, smp.labels, smp.value))
                        continue
                    key = (tid, smp.name, tuple(sorted(smp.labels.items())))
                    before = self.last.get(key)
                    if before is not None and smp.value < before:
                        self.base[key] = self.base.get(key, 0.0) + before
                    self.last[key] = smp.value
        for key, value in self.last.items():
            out.append((key[1], dict(key[2]), value + self.base.get(key, 0.0)))
        return out


# counter -> summary key, by a label: (label, value that picks the first key, first key, other key)
COUNTERS = {
    "dynaweb_collector_steps_total": ("policy", "expert", "expert_steps", "real_steps"),
    "dynaweb_dream_steps_total": (None, None, "dream_steps", "dream_steps"),
    # dreamed episodes published, and those dropped as stale by the mixer and by the trainer
    "dynaweb_dream_rollouts_total": (None, None, "dream_episodes", "dream_episodes"),
    "dynaweb_stream_stale_dropped_dream_trajectories_total": (
        None,
        None,
        "dream_stale_dropped",
        "dream_stale_dropped",
    ),
    "dynaweb_trainer_stale_dropped_total": (
        "source",
        "dream",
        "dream_stale_dropped",
        "stale_other",
    ),
    "dynaweb_trainer_steps_total": ("model", "policy", "policy_steps", "wm_steps"),
    "dynaweb_stream_batches_total": (None, None, "batches", "batches"),
    "dynaweb_stream_dead_letters_total": (None, None, "dead_letters", "dead_letters"),
    # dreamed steps whose world-model output was repaired or rejected (the page left unchanged)
    "dynaweb_dream_world_model_invalid_total": (
        None,
        None,
        "dream_steps_repaired",
        "dream_steps_repaired",
    ),
}
# gauge of the policy version -> summary key (the highest over the live targets)
VERSIONS = {
    "dynaweb_trainer_checkpoint_version": "checkpoint_version",
    "dynaweb_dream_model_version": "dream_policy_version",
}


def _empty_summary() -> dict:
    s: dict = dict.fromkeys(
        (
            "real_steps",
            "expert_steps",
            "dream_steps",
            "episodes",
            "successes",
            "policy_episodes",
            "policy_successes",
            "expert_episodes",
            "expert_successes",
            "policy_steps",
            "wm_steps",
            "batches",
            "dead_letters",
            "dream_steps_repaired",
            "dream_episodes",
            "dream_stale_dropped",
            "stale_other",
        ),
        0.0,
    )
    s.update({"checkpoint_version": None, "dream_policy_version": None, "components": 0})
    s["gspo_groups"] = {"real": 0.0, "dream": 0.0}
    s["gspo_groups_nonzero"] = {"real": 0.0, "dream": 0.0}
    s["dream_groups"] = {"varied": 0.0, "uniform": 0.0}
    s["wm_fidelity"] = {}  # the trainer's rolling check on fresh real transitions, by metric
    s["trainer_waiting"] = {}  # phase -> 1 while the trainer waits on it (before its first updates)
    s["pending_trajectories"] = None  # live trajectories queued at the stream workers
    s["expert_pool"] = None  # expert trajectories in the stream workers' mixing pools
    return s


def _add(s: dict, n: str, lab: dict, v: float) -> None:
    """One sample into the summary."""
    if n in COUNTERS:
        label, value, first, other = COUNTERS[n]
        s[first if label is None or lab.get(label) == value else other] += v
    elif n == "dynaweb_collector_episodes_total":
        who = (
            "expert" if lab.get("policy") == "expert" else "policy"
        )  # latest or random: not experts
        ok = lab.get("outcome") == "success"
        s["episodes"] += v
        s["successes"] += v * ok
        s[f"{who}_episodes"] += v
        s[f"{who}_successes"] += v * ok
    elif n in ("dynaweb_trainer_gspo_groups_total", "dynaweb_trainer_gspo_groups_nonzero_total"):
        key = "gspo_groups_nonzero" if "nonzero" in n else "gspo_groups"
        s[key][lab.get("source", "")] = s[key].get(lab.get("source", ""), 0.0) + v
    elif n == "dynaweb_dream_groups_total":  # as published, before the stream worker and trainer
        s["dream_groups"][lab.get("rewards", "")] = (
            s["dream_groups"].get(lab.get("rewards", ""), 0.0) + v
        )
    elif n == "dynaweb_trainer_waiting":
        s["trainer_waiting"][lab.get("phase", "")] = v
    elif n in ("dynaweb_stream_pending_trajectories", "dynaweb_stream_expert_pool_trajectories"):
        key = "pending_trajectories" if "pending" in n else "expert_pool"
        s[key] = (s[key] or 0.0) + v
    elif n == "dynaweb_trainer_world_model_fidelity":
        s["wm_fidelity"][lab.get("metric", "")] = v
    elif n in VERSIONS and lab.get("kind") == "policy":
        s[VERSIONS[n]] = max(v, s[VERSIONS[n]] or 0)


def summarize(cfg: Config, totals: CounterTotals | None = None) -> dict:
    """The run's progress from its components' own metrics; ``totals`` (kept by the caller across
    calls) makes the counters survive component restarts."""
    s = _empty_summary()
    scraped = scrape_targets(cfg)
    s["components"] = len(scraped)
    for n, lab, v in (totals or CounterTotals()).samples(scraped):
        _add(s, n, lab, v)
    s["success_rate"] = s["successes"] / s["episodes"] if s["episodes"] else None
    for who in ("policy", "expert"):
        n = s[f"{who}_episodes"]
        s[f"{who}_success_rate"] = s[f"{who}_successes"] / n if n else None
    # the share of dreamed steps whose world-model output applied as written
    d = s["dream_steps"]
    s["dream_apply_rate"] = 1.0 - min(d, s["dream_steps_repaired"]) / d if d else None
    e = s["dream_episodes"]  # the stale share of dreamed episodes (dream.pace bounds it)
    s["dream_stale_share"] = min(1.0, s["dream_stale_dropped"] / e) if e else None
    s["nonzero_adv_share"] = {
        src: (s["gspo_groups_nonzero"][src] / g if g else None)
        for src, g in s["gspo_groups"].items()
    }
    return s


class RecentSuccess:
    """Policy and expert success over the last ``window_s`` seconds, from successive summaries
    (differences of the collectors' episode counters; a restarted collector's reset counts from 0)."""

    def __init__(self, window_s: float = 120.0):
        self.window_s = window_s
        self.history: deque = deque()

    def update(self, s: dict, now: float) -> dict:
        keys = ("policy_episodes", "policy_successes", "expert_episodes", "expert_successes")
        self.history.append((now, {k: s[k] for k in keys}))
        while len(self.history) > 2 and now - self.history[1][0] >= self.window_s:
            self.history.popleft()
        t0, old = self.history[0]
        d = {k: s[k] - old[k] if s[k] >= old[k] else s[k] for k in keys}
        for who in ("policy", "expert"):
            n = d[f"{who}_episodes"]
            s[f"{who}_success_recent"] = d[f"{who}_successes"] / n if n else None
            s[f"{who}_episodes_recent"] = n
        s["recent_window_s"] = round(now - t0, 1)
        return s


def progress_line(s: dict, elapsed: float) -> str:
    def i(x: float | None) -> str:
        return "-" if x is None else str(int(x))

    def pct(key: str) -> str:
        v = s.get(key + "_success_recent", s.get(key + "_success_rate"))
        return "-" if v is None else f"{100 * v:.0f}%"

    nz = s.get("nonzero_adv_share", {})
    share = " ".join(
        f"{src} {'-' if nz.get(src) is None else f'{100 * nz[src]:.0f}%'}"
        for src in ("real", "dream")
    )
    return (
        f"[up {elapsed:5.0f}s] real {i(s['real_steps'])} expert {i(s['expert_steps'])} "
        f"dream {i(s['dream_steps'])} | batches {i(s['batches'])} trainer step {i(s['policy_steps'])} "
        f"(wm {i(s['wm_steps'])}) | ckpt v{i(s['checkpoint_version'])} dreaming with "
        f"v{i(s['dream_policy_version'])} | policy success {pct('policy')} (expert {pct('expert')}) | "
        f"groups with advantage {share} | components {s['components']}"
    )


def _count(x: float | None) -> str:
    return "-" if x is None else str(int(x))


def waiting_for(s: dict, batch_trajectories: int) -> str:
    """What the loop waits for before its first policy and world-model updates ("" once both
    came): the trainer's phase (``dynaweb_trainer_waiting``), else the stream worker's queue."""
    if s["policy_steps"] >= 1 and s["wm_steps"] >= 1:
        return ""
    w = s.get("trainer_waiting") or {}
    if not w:
        return "the trainer (its metrics endpoint is not up yet, or did not answer)"
    if w.get("models"):
        return "the trainer loading both models"
    if w.get("checkpoint_v0"):
        return "the trainer writing version 0 (the collectors and dream generators start from it)"
    out = []
    if s["policy_steps"] < 1:
        if s["batches"] < 1:
            out.append(
                f"the first policy batch of {batch_trajectories} trajectories from the stream "
                f"worker ({_count(s.get('pending_trajectories'))} live queued, "
                f"{_count(s.get('expert_pool'))} expert pooled)"
            )
        else:
            out.append(f"the trainer's first policy update ({int(s['batches'])} batches made)")
    if s["wm_steps"] < 1 and w.get("wm_transitions"):
        seen = s["real_steps"] + s["expert_steps"]
        out.append(
            "world model: its first update"
            + (f" ({int(seen)} real and expert steps collected)" if seen else ": no real steps yet")
        )
    return "; ".join(out)


def note_firsts(firsts: dict, s: dict, elapsed: float) -> None:
    """Seconds from ``up``'s start to the first checkpoint and the first update of each model, as
    first seen in a summary (so within ``up.progress_every_s`` of the event)."""
    for key, seen in (
        ("first_checkpoint_s", s["checkpoint_version"] is not None),
        ("first_policy_update_s", s["policy_steps"] >= 1),
        ("first_wm_update_s", s["wm_steps"] >= 1),
    ):
        if seen and key not in firsts:
            firsts[key] = round(elapsed, 1)


def dream_line(s: dict) -> str:
    """What the dreams were made of: the world model's outputs that applied as written, and the
    trainer's rolling fidelity check against "nothing changes" (the page copied)."""
    rate = s.get("dream_apply_rate")
    fid = s.get("wm_fidelity") or {}
    text = "-" if rate is None else f"{100 * rate:.0f}%"
    out = f"[up] dreams: {text} of {s['dream_steps']:.0f} dreamed steps applied as written"
    stale = s.get("dream_stale_share")
    if stale is not None:
        out += (
            f"; {s['dream_stale_dropped']:.0f} of {s['dream_episodes']:.0f} dreamed episodes "
            f"({100 * stale:.0f}%) dropped as stale"
        )
    # the trainer's window of checked real transitions (the wm_gate's), else its last check
    pre = "window_" if "window_exact_match" in fid else ""
    if f"{pre}exact_match" in fid and f"{pre}baseline_exact_match" in fid:
        out += (
            f"; world model exact match {fid[f'{pre}exact_match']:.2f} against "
            f"{fid[f'{pre}baseline_exact_match']:.2f} for 'nothing changes' on the trainer's "
            f"last {fid.get(f'{pre}n', 0):.0f} real transitions"
        )
    return out


class AppKeeper:
    """Keeps the web applications ``up`` started running: a thread that starts one again when its
    process died (its collectors fail the episodes of the outage with the reason, never as a
    success) and counts the restarts."""

    def __init__(self, cfg: Config, names: list[str], every_s: float = 2.0):
        self.names, self.every_s = names, every_s
        self.restarts: dict[str, int] = {}
        self._stack = Stack(cfg)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="app-keeper", daemon=True)
        if names:
            self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                for name in self._stack.revive(self.names):
                    self.restarts[name] = self.restarts.get(name, 0) + 1
                    print(f"[up] {name} had died: started again", flush=True)
            except (OSError, StackError) as e:  # tried again at the next tick
                print(f"[up] restarting an app failed: {e}", flush=True)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30)


def stored_model_refusal(cfg: Config) -> str:
    """Why this run id's stored checkpoints must not be continued under ``cfg`` (written for
    another model: ``models.checkpoints.spec``), or "" when they may (or there are none)."""
    from core.s3 import make_client
    from models.checkpoints.spec import ModelSpecMismatch, check_run
    from models.checkpoints.store import CheckpointStore

    try:
        check_run(CheckpointStore(make_client(cfg), cfg.s3.bucket, cfg.run_id), cfg.model)
    except ModelSpecMismatch as e:
        return str(e)
    return ""


def run_up(
    cfg: Config, duration: float = 0, start_stack: bool = True, as_json: bool = False
) -> int:
    from streams.kafka import ensure_topics

    stack = Stack(cfg)
    if start_stack:
        print("[up] starting the stack (S3, broker, task server, Prometheus)...", flush=True)
        for name, st in stack.up().items():
            print(f"[up]   {name:11s} {st['endpoint']}", flush=True)
    refusal = stored_model_refusal(cfg)
    if refusal:
        print(f"[up] {refusal}", flush=True)
        if start_stack and stack.started:
            stack.down(only=stack.started)
        return 2
    ensure_topics(cfg)
    sup = Supervisor(cfg, component_argv(cfg))
    stop = {"now": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.update(now=True))
    t0 = time.time()
    last = 0.0
    code = 0
    print(f"[up] run {cfg.run_id}: logs in {sup.logs}; Ctrl-C stops", flush=True)
    recent, totals, firsts = RecentSuccess(), CounterTotals(), {}
    # the apps this run collects on, whether this start or an earlier one started them
    apps = AppKeeper(cfg, [n for n in OPTIONAL if stack.wanted(n, None)]) if start_stack else None
    try:
        while not stop["now"] and not (duration and time.time() - t0 >= duration):
            sup.supervise()
            if time.time() - last >= cfg.up.progress_every_s:
                s = recent.update(summarize(cfg, totals), time.time())
                note_firsts(firsts, s, time.time() - t0)
                wait = waiting_for(s, cfg.stream.batch_trajectories)
                line = progress_line(s, time.time() - t0)
                print(line + (f" | waiting for: {wait}" if wait else ""), flush=True)
                last = time.time()
            time.sleep(0.2)
    except KeyboardInterrupt:
        code = 130
    summary = summarize(cfg, totals)
    note_firsts(firsts, summary, time.time() - t0)
    # seconds to the first checkpoint and first updates (None: not within this run)
    for key in ("first_checkpoint_s", "first_policy_update_s", "first_wm_update_s"):
        summary[key] = firsts.get(key)
    print("[up] stopping components...", flush=True)
    if apps is not None:
        apps.stop()
    sup.stop()
    if start_stack and stack.started:
        print(f"[up] stopping {', '.join(stack.started)}...", flush=True)
        stack.down(only=stack.started)
    summary["restarts"] = {c.name: c.restarts for c in sup.children if c.restarts}
    if apps is not None and apps.restarts:
        summary["restarts"].update(apps.restarts)
    summary["elapsed_s"] = round(time.time() - t0, 1)
    hours = max(summary["elapsed_s"], 1.0) / 3600
    # the learner's rate, the figure that matters: optimizer updates per hour of the whole run
    summary["policy_updates_per_h"] = round(summary["policy_steps"] / hours, 1)
    summary["wm_updates_per_h"] = round(summary["wm_steps"] / hours, 1)
    print(progress_line(summary, summary["elapsed_s"]), flush=True)
    print(
        f"[up] learner: {summary['policy_updates_per_h']:.0f} policy and "
        f"{summary['wm_updates_per_h']:.0f} world-model updates per hour",
        flush=True,
    )
    print(dream_line(summary), flush=True)
    if as_json:
        print(json.dumps(summary))
    return code
