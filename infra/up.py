"""``dynaweb up``: the stack plus one of each component, supervised.

Components run as child processes (``python -m infra.cli <command>``, supervised
by ``core.supervise.Supervisor``) with the resolved config in
``HOME/runs/<run>/config.json`` (secrets stay in the environment / credentials
file).  A crashed component is restarted with back-off; progress is read from
the components' own metrics endpoints (found through the Prometheus
file-discovery targets: ``core.metrics.scrape_targets``), so it works even with
Prometheus down.  Ctrl-C or ``--duration`` stops everything cleanly.
"""

from __future__ import annotations

import json
import signal
import time
from collections import deque

from prometheus_client.parser import text_string_to_metric_families

from core.config import Config
from core.metrics import scrape_targets
from core.supervise import Supervisor
from infra.stack import Stack


def component_argv(cfg: Config) -> dict[str, list[str]]:
    comps = {"stream-worker": ["stream-worker"], "trainer": ["train"]}
    for i in range(cfg.up.dreamers):
        comps[f"dream-{i}"] = ["dream"]
    comps["collector-expert"] = [
        "collect",
        "--policy",
        "expert",
        "--contexts",
        str(cfg.up.expert_contexts),
        "--id",
        f"collector-expert-{cfg.run_id}",
        "--set",
        f"collector.max_steps_per_s={cfg.up.expert_steps_per_s}",
    ]
    if cfg.gate.enabled:  # candidates become LATEST only through the gate's probes
        comps["gate"] = ["gate"]
    for i in range(cfg.up.policy_collectors):
        comps[f"collector-latest-{i}"] = [
            "collect",
            "--policy",
            "latest",
            "--contexts",
            "1",
            "--id",
            f"collector-latest-{i}-{cfg.run_id}",
            "--set",
            f"collector.groups_per_version={cfg.up.policy_groups_per_version}",
        ]
    return comps


def summarize(cfg: Config) -> dict:
    s = {
        "real_steps": 0.0,
        "expert_steps": 0.0,
        "dream_steps": 0.0,
        "episodes": 0.0,
        "successes": 0.0,
        "policy_episodes": 0.0,
        "policy_successes": 0.0,
        "expert_episodes": 0.0,
        "expert_successes": 0.0,
        "policy_steps": 0.0,
        "wm_steps": 0.0,
        "checkpoint_version": None,
        "dream_policy_version": None,
        "batches": 0.0,
        "dead_letters": 0.0,
        "components": 0,
        "gspo_groups": {"real": 0.0, "dream": 0.0},
        "gspo_groups_nonzero": {"real": 0.0, "dream": 0.0},
    }
    for _labels, text in scrape_targets(cfg):
        s["components"] += 1
        for fam in text_string_to_metric_families(text):
            for smp in fam.samples:
                n, lab, v = smp.name, smp.labels, smp.value
                if n == "dynaweb_collector_steps_total":
                    s["expert_steps" if lab.get("policy") == "expert" else "real_steps"] += v
                elif n == "dynaweb_collector_episodes_total":
                    who = (
                        "expert" if lab.get("policy") == "expert" else "policy"
                    )  # latest or random: not experts
                    ok = lab.get("outcome") == "success"
                    s["episodes"] += v
                    s["successes"] += v * ok
                    s[f"{who}_episodes"] += v
                    s[f"{who}_successes"] += v * ok
                elif n in (
                    "dynaweb_trainer_gspo_groups_total",
                    "dynaweb_trainer_gspo_groups_nonzero_total",
                ):
                    key = "gspo_groups_nonzero" if "nonzero" in n else "gspo_groups"
                    s[key][lab.get("source", "")] = s[key].get(lab.get("source", ""), 0.0) + v
                elif n == "dynaweb_dream_steps_total":
                    s["dream_steps"] += v
                elif n == "dynaweb_trainer_steps_total":
                    s["policy_steps" if lab.get("model") == "policy" else "wm_steps"] += v
                elif n == "dynaweb_trainer_checkpoint_version" and lab.get("kind") == "policy":
                    s["checkpoint_version"] = max(v, s["checkpoint_version"] or 0)
                elif n == "dynaweb_dream_model_version" and lab.get("kind") == "policy":
                    s["dream_policy_version"] = max(v, s["dream_policy_version"] or 0)
                elif n == "dynaweb_stream_batches_total":
                    s["batches"] += v
                elif n == "dynaweb_stream_dead_letters_total":
                    s["dead_letters"] += v
    s["success_rate"] = s["successes"] / s["episodes"] if s["episodes"] else None
    for who in ("policy", "expert"):
        n = s[f"{who}_episodes"]
        s[f"{who}_success_rate"] = s[f"{who}_successes"] / n if n else None
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


def run_up(
    cfg: Config, duration: float = 0, start_stack: bool = True, as_json: bool = False
) -> int:
    from streams.kafka import ensure_topics

    stack = Stack(cfg)
    if start_stack:
        print("[up] starting the stack (S3, broker, task server, Prometheus)...", flush=True)
        for name, st in stack.up().items():
            print(f"[up]   {name:11s} {st['endpoint']}", flush=True)
    ensure_topics(cfg)
    sup = Supervisor(cfg, component_argv(cfg))
    stop = {"now": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.update(now=True))
    t0 = time.time()
    last = 0.0
    code = 0
    print(f"[up] run {cfg.run_id}: logs in {sup.logs}; Ctrl-C stops", flush=True)
    recent = RecentSuccess()
    try:
        while not stop["now"] and not (duration and time.time() - t0 >= duration):
            sup.supervise()
            if time.time() - last >= cfg.up.progress_every_s:
                print(
                    progress_line(recent.update(summarize(cfg), time.time()), time.time() - t0),
                    flush=True,
                )
                last = time.time()
            time.sleep(0.2)
    except KeyboardInterrupt:
        code = 130
    summary = summarize(cfg)
    print("[up] stopping components...", flush=True)
    sup.stop()
    if start_stack and stack.started:
        print(f"[up] stopping {', '.join(stack.started)}...", flush=True)
        stack.down(only=stack.started)
    summary["restarts"] = {c.name: c.restarts for c in sup.children if c.restarts}
    summary["elapsed_s"] = round(time.time() - t0, 1)
    print(progress_line(summary, summary["elapsed_s"]), flush=True)
    if as_json:
        print(json.dumps(summary))
    return code
