"""`dynaweb up --duration` as a user runs it, checked from the topics, S3 and metrics.

Proves: real and dream transitions flowed; at least two checkpoint versions were
written; dreams stamped with policy version >= 2 came from a generator process
whose start time never changed (hot reload, not a restart); live GSPO groups,
named by the latest-policy collector, reached the loss, some with a nonzero
advantage, and dream groups reached it too, some with a nonzero advantage (the
world model's trained reward head gave the rollouts of one start page different
rewards), read from the trainer's own metrics (``up --json`` scrapes them before
it stops the components)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from signal import SIGTERM

from prometheus_client.parser import text_string_to_metric_families

from core.config import Config
from core.s3 import make_client
from infra.monitoring.check import wait_for_queries
from infra.up import summarize
from models.checkpoints.store import CheckpointStore
from streams import records
from streams.kafka import read_until_sentinel
from streams.topics import Topics
from tests.factories import UP_SETTINGS
from tests.listening import beyond_loopback, listening_sockets, process_tree
from tests.support import env_for

# 250 s (was 200): dream groups with differing rewards come once the live policy clicks (its failures teach
# the reward head) and the world model has trained on that for a while, about 100 s in on a quiet machine.
# The most the run may take: the test stops it (SIGTERM, as a user's stop) once the components' own
# metrics show everything asserted below has happened (``_shown``), usually well before.
DURATION = 250


def _scrape(cfg: Config, component: str) -> list[dict]:
    out = []
    for f in (Path(cfg.home) / "prometheus" / "targets").glob(f"{component}-*.json"):
        try:
            entry = json.loads(f.read_text())[0]
            if entry["labels"]["run"] != cfg.run_id:
                continue
            with urllib.request.urlopen(f"http://{entry['targets'][0]}/metrics", timeout=2) as r:
                text = r.read().decode()
        except (OSError, ValueError, IndexError):
            continue
        vals: dict = {}
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                vals[(s.name, tuple(sorted(s.labels.items())))] = s.value
        out.append(vals)
    return out


def _get(vals: dict, name: str, **labels: str) -> float | None:
    for (n, lab), v in vals.items():
        if n == name and all(dict(lab).get(k) == x for k, x in labels.items()):
            return v
    return None


def _read(cfg: Config, topic: str) -> list[records.Transition]:
    out = []
    for _, raw in read_until_sentinel(cfg.kafka, topic, cfg.run_id, timeout=60):
        try:
            rec = records.decode(raw)
        except records.RecordError:
            continue
        if isinstance(rec, records.Transition):
            out.append(rec)
    return out


def _up_processes(cfg: Config, pid: int) -> dict[int, str]:
    """pid -> command line of the `up` process tree and of the stack's services (what `up` starts
    without --no-stack; here the session's stack started them, the same way)."""
    pids = process_tree(pid)
    for f in (Path(cfg.home) / "pids").glob("*.json"):
        try:
            pids |= process_tree(json.loads(f.read_text())["pid"])
        except (OSError, ValueError, KeyError):
            continue
    out = {}
    for p in pids:
        try:
            out[p] = " ".join(Path(f"/proc/{p}/cmdline").read_bytes().decode().split("\0")[:4])
        except OSError:
            out[p] = str(p)
    return out


def _dreamed_versions(samples: list[tuple]) -> set:
    """Policy versions that dreams were published with: the dream generator's loaded version was the
    same at two scrapes (one process) and its dream-step counter grew between them."""
    out = set()
    for (s0, v0, n0), (s1, v1, n1) in zip(samples, samples[1:], strict=False):
        if None not in (s0, v0, n0, n1) and s0 == s1 and v0 == v1 and n1 > n0:
            out.add(v0)
    return out


def _shown(cfg: Config, samples: list[tuple]) -> bool:
    """Whether the running loop's own metrics already show what the test asserts after the run:
    expert successes, dreams, policy checkpoints >= 2, dreams published with several policy versions
    up to one >= 2, and live and dream GSPO groups with a nonzero advantage at the trainer's loss."""
    s = summarize(cfg)
    versions = _dreamed_versions(samples)
    # with margin over the bounds below: what a component counted may not all be on a topic yet
    if not (
        s["expert_steps"] >= 40
        and s["expert_successes"] >= 2
        and s["dream_steps"] >= 20
        and s["policy_steps"] >= 4
        and len(versions) >= 3
        and max(versions) >= 2
        and all(
            s[k]["real"] >= 1 and s[k]["dream"] >= 1 for k in ("gspo_groups", "gspo_groups_nonzero")
        )
    ):
        return False
    store = CheckpointStore(make_client(cfg), cfg.s3.bucket, cfg.run_id)
    return len([v for v in store.versions("policy") if v >= 1]) >= 2


def test_up_runs_the_loop_with_hot_reload(run_cfg: Config, tmp_path: Path) -> None:
    env = env_for(run_cfg, **UP_SETTINGS)
    out_path = tmp_path / "up.out"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "infra.cli",
            "up",
            "--no-stack",
            "--duration",
            str(DURATION),
            "--json",
        ],
        env=env,
        stdout=open(out_path, "w"),
        stderr=subprocess.STDOUT,
    )
    # (process start time, policy version in use, dream steps) of every dream generator, over time
    samples = []
    dashboard_problems = None
    exposed, inspected = set(), set()  # listeners beyond loopback; command lines looked at
    started, stopping = time.time(), False
    try:
        while proc.poll() is None:
            procs = _up_processes(run_cfg, proc.pid)
            inspected |= set(procs.values())
            for sk in beyond_loopback(listening_sockets(set(procs))):
                exposed.add((procs.get(sk.pid, str(sk.pid)), sk.proto, sk.ip, sk.port))
            for vals in _scrape(run_cfg, "dream"):
                samples.append(
                    (
                        _get(vals, "process_start_time_seconds"),
                        _get(vals, "dynaweb_dream_model_version", kind="policy"),
                        _get(vals, "dynaweb_dream_steps_total"),
                    )
                )
            shown = not stopping and _shown(run_cfg, samples)
            if dashboard_problems is None and (shown or time.time() - started > DURATION - 65):
                # every dashboard panel and alert expression against the live Prometheus, mid-run
                prom = f"http://127.0.0.1:{run_cfg.stack.prometheus_port}"
                dashboard_problems = wait_for_queries(prom, {"run": run_cfg.run_id}, timeout_s=45)
                if dashboard_problems and time.time() - started <= DURATION - 65:
                    dashboard_problems = None  # early: checked again at the usual time
            if shown and dashboard_problems is not None:
                proc.send_signal(SIGTERM)  # `up` stops its components, prints the summary
                stopping = True
            time.sleep(2)
        assert proc.returncode == 0, out_path.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
    out = out_path.read_text()
    # nothing `up` started listened beyond loopback (the trainer's torch.distributed included)
    assert not exposed, f"listening beyond loopback: {sorted(exposed)}"
    assert any(" train" in c for c in inspected) and any("tansu" in c for c in inspected)
    assert dashboard_problems == [], (
        "dashboard/alert queries without data or invalid:\n"
        + "\n".join(dashboard_problems or ["(never checked: the run ended early)"])
    )
    summary = json.loads(out.strip().splitlines()[-1])
    topics = Topics(run_cfg.run_id)

    # real (expert) and dream transitions flowed through the broker
    expert = _read(run_cfg, topics.expert)
    dreams = _read(run_cfg, topics.dream)
    assert len(expert) >= 20, out[-2000:]
    assert any(t.reward > 0 for t in expert), "no successful expert episode"
    assert len(dreams) >= 10, out[-2000:]
    assert {t.source for t in dreams} == {"dream"}

    # at least two checkpoint versions beyond the initial one, in S3, with LATEST
    store = CheckpointStore(make_client(run_cfg), run_cfg.s3.bucket, run_cfg.run_id)
    versions = store.versions("policy")
    assert len([v for v in versions if v >= 1]) >= 2, versions
    assert store.latest("policy")["version"] == max(versions)

    # hot reload: one dream producer (one process: its start time, scraped while running, never
    # changed) dreamed with several policy versions, up to one >= 2.  (Not "with a version < 2":
    # checkpoints come every few seconds here, and the first round after the first load is given
    # up when the next version is announced mid-round, so the first completed round may already
    # carry v2; the loaded version is scraped every 2 s, so it may be first seen at v1 or v2.)
    late = [t for t in dreams if t.policy_version >= 2]
    assert late, (
        f"no dream stamped with policy version >= 2: {sorted({t.policy_version for t in dreams})}"
    )
    by_producer: dict[str, set[int]] = {}
    for t in dreams:
        by_producer.setdefault(t.producer_id, set()).add(t.policy_version)
    assert any(len(vs) >= 2 and max(vs) >= 2 for vs in by_producer.values()), by_producer
    starts = {s for s, _, _ in samples if s is not None}
    seen_versions = {v for _, v, _ in samples if v is not None}
    assert len(starts) == 1, f"dream generator restarted: start times {starts}"
    assert len(seen_versions) >= 2 and max(seen_versions) >= 2, seen_versions
    assert not any(k.startswith("dream") for k in summary.get("restarts", {})), summary
    # every dream carries both model versions
    assert all(t.world_model_version >= 0 and t.behaviour_logprob is not None for t in dreams)
    assert summary["policy_steps"] >= 4 and summary["dream_steps"] >= 10, summary
    # the RL signal, from the trainer's own counters: live groups (group ids from the collector) and
    # dream groups reached the loss, and live groups of differing rewards carried an advantage there
    live = _read(run_cfg, topics.real)
    assert live and all(t.group_id for t in live), "live-policy transitions without a group id"
    keys = (
        "gspo_groups",
        "gspo_groups_nonzero",
        "dream_groups",
        "policy_steps",
        "wm_steps",
        "batches",
    )
    signal = json.dumps({k: summary[k] for k in keys})
    assert summary["gspo_groups"]["real"] >= 1 and summary["gspo_groups"]["dream"] >= 1, (
        signal + out[-3000:]
    )
    assert summary["gspo_groups_nonzero"]["real"] >= 1, signal + out[-3000:]
    # ... and so did dream groups: rewards from the world model's reward head differed within a group
    assert summary["gspo_groups_nonzero"]["dream"] >= 1, signal + out[-3000:]
    assert "policy success" in out and "groups with advantage" in out
