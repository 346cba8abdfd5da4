"""Supervisor hygiene, unit level (fakes allowed here): the restart back-off and its reset after a
healthy run, removal of a dead component's file-discovery targets, running totals that survive
component restarts (``up``), ``status`` counting live components and totals over restarts, and
``dynaweb infra down --only``.  The real supervisor with real children is
tests/integration/test_supervisor_hygiene.py."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from core.config import Config, load_config
from core.metrics import remove_dead_targets, remove_targets, run_targets, scrape_targets
from core.supervise import Child, Supervisor
from infra import up as up_mod
from infra.stack import RETENTION, Stack, StackError
from infra.status import gather, render


def _cfg(tmp_path: Path, **over: object) -> Config:
    return load_config(env={}, overrides={"home": str(tmp_path), "run_id": "r1", **over})


def _target(cfg: Config, component: str, pid: int, host: str = "127.0.0.1", run: str = "") -> Path:
    d = cfg.home_path / "prometheus" / "targets"
    d.mkdir(parents=True, exist_ok=True)
    f = d / f"{component}-{pid}.json"
    labels = {"component": component, "run": run or cfg.run_id, "pid": str(pid)}
    f.write_text(json.dumps([{"targets": [f"{host}:1234"], "labels": labels}]))
    return f


# --- back-off ----------------------------------------------------------------------------------


class _Exited:
    """A stand-in for a Popen whose process has exited."""

    def __init__(self, pid: int, rc: int = 1):
        self.pid, self.returncode = pid, rc

    def poll(self) -> int:
        return self.returncode


def test_backoff_doubles_then_starts_over_after_a_healthy_run(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, **{"up.restart_backoff_s": 2.0, "up.restart_healthy_s": 60.0})
    sup = Supervisor(cfg, {"c": ["x"]})
    c = sup.child("c")
    t = 1000.0
    delays = []
    for uptime in (1, 5, 10, 30, 50, 59.9):  # crashes before the healthy period
        c.started_at = t
        t += uptime
        delays.append(sup.restart_delay(c, t))
    assert delays == [2, 4, 8, 16, 30, 30]  # doubles, capped at 30 s
    c.started_at, t = t, t + 60.0  # ran the healthy period, then exited
    assert sup.restart_delay(c, t) == 2.0
    c.started_at, t = t, t + 1.0  # a quick crash after that doubles again
    assert sup.restart_delay(c, t) == 4.0


def test_supervise_records_the_delays_and_removes_the_dead_childs_targets(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, **{"up.restart_backoff_s": 0.5, "up.restart_healthy_s": 60.0})
    sup = Supervisor(cfg, {"c": ["x"], "other": ["y"]})
    c = sup.child("c")
    dead = _target(cfg, "c", 4242)
    alive = _target(cfg, "other", os.getpid())
    c.proc, c.started_at = _Exited(4242, rc=3), time.time()
    sup.child("other").done = True  # not started by this test
    sup.supervise()
    assert c.exits == [3] and c.restarts == 1 and c.delays == [0.5] and c.proc is None
    assert not dead.exists() and alive.exists()


def test_once_job_exit_zero_is_done_and_its_targets_go(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path)
    sup = Supervisor(cfg, {"job": ["x"]}, once=("job",))
    f = _target(cfg, "job", 4343)
    c = sup.child("job")
    c.proc = _Exited(4343, rc=0)
    sup.supervise()
    assert c.done and c.restarts == 0 and not f.exists()


def test_child_defaults_keep_the_old_fields() -> None:
    c = Child("n", ["a"], Path("/tmp/x.log"))
    assert (c.restarts, c.backoff, c.exits, c.delays, c.done) == (0, 2.0, [], [], False)


# --- target files ------------------------------------------------------------------------------


def test_remove_targets_by_pid_only_this_run(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path)
    other_run = _target(cfg, "trainer", 11, run="another")
    other_run = other_run.rename(other_run.with_name("trainer-11-another.json"))
    mine = _target(cfg, "trainer", 11)
    other_pid = _target(cfg, "dream", 12)
    assert remove_targets(cfg, [11]) == [mine]
    assert not mine.exists() and other_pid.exists() and other_run.exists()
    assert [f.name for f, _ in run_targets(cfg)] == ["dream-12.json"]


def test_remove_dead_targets_keeps_live_and_remote_ones(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path)
    p = subprocess.Popen(["true"])
    p.wait()  # a pid that no longer exists
    dead = _target(cfg, "trainer", p.pid)
    live = _target(cfg, "dream", os.getpid())
    remote = _target(cfg, "collector", p.pid + 100000, host="gpu7")  # another machine's
    assert remove_dead_targets(cfg) == [dead]
    assert live.exists() and remote.exists()


def test_scrape_targets_skips_unreadable_files(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path)
    d = cfg.home_path / "prometheus" / "targets"
    d.mkdir(parents=True)
    (d / "broken.json").write_text("{not json")
    (d / "empty.json").write_text("[]")
    assert scrape_targets(cfg) == []


# --- running totals (dynaweb up) ---------------------------------------------------------------


def _text(batches: float, steps: float, version: float) -> str:
    return (
        "# TYPE dynaweb_stream_batches_total counter\n"
        f'dynaweb_stream_batches_total{{run="r1"}} {batches}\n'
        "# TYPE dynaweb_trainer_steps_total counter\n"
        f'dynaweb_trainer_steps_total{{run="r1",model="policy"}} {steps}\n'
        "# TYPE dynaweb_trainer_checkpoint_version gauge\n"
        f'dynaweb_trainer_checkpoint_version{{run="r1",kind="policy"}} {version}\n'
    )


def _labels(pid: int) -> dict:
    return {"component": "x", "component_id": "x-r1", "run": "r1", "pid": str(pid)}


def test_counter_totals_survive_restarts_and_resets() -> None:
    tot = up_mod.CounterTotals()

    def sums(scraped: list) -> dict:
        out: dict = {}
        for n, lab, v in tot.samples(scraped):
            key = (n, lab.get("model") or lab.get("kind"))
            out[key] = out.get(key, 0.0) + v
        return out

    first = sums([(_labels(1), _text(126, 10, 4))])
    assert first[("dynaweb_stream_batches_total", None)] == 126
    # the process restarted: a new target counting from 0, the old one gone
    after = sums([(_labels(2), _text(2, 1, 4))])
    assert after[("dynaweb_stream_batches_total", None)] == 128
    assert after[("dynaweb_trainer_steps_total", "policy")] == 11
    assert after[("dynaweb_trainer_checkpoint_version", "policy")] == 4  # a gauge: live only
    # a reset within one target (same pid) adds the value it had before
    reset = sums([(_labels(2), _text(1, 1, 5))])
    assert reset[("dynaweb_stream_batches_total", None)] == 126 + 2 + 1
    # nothing answers for a moment: counters keep their totals, gauges are not reported
    quiet = sums([])
    assert quiet[("dynaweb_stream_batches_total", None)] == 129
    assert ("dynaweb_trainer_checkpoint_version", "policy") not in quiet


def test_up_summary_and_progress_line_keep_totals_across_a_restart(monkeypatch) -> None:
    scraped = [[(_labels(1), _text(126, 10, 4))], [(_labels(2), _text(2, 1, 4))]]
    monkeypatch.setattr(up_mod, "scrape_targets", lambda cfg: scraped.pop(0))
    tot = up_mod.CounterTotals()
    cfg = Config()
    s1 = up_mod.summarize(cfg, tot)
    s2 = up_mod.summarize(cfg, tot)
    assert (s1["batches"], s1["policy_steps"], s1["checkpoint_version"]) == (126, 10, 4)
    assert (s2["batches"], s2["policy_steps"], s2["components"]) == (128, 11, 1)
    line = up_mod.progress_line(s2, 10.0)
    assert "batches 128 " in line and "trainer step 11 " in line and "ckpt v4 " in line


def test_summarize_without_totals_reads_one_scrape(monkeypatch) -> None:
    monkeypatch.setattr(up_mod, "scrape_targets", lambda cfg: [(_labels(1), _text(7, 3, 1))])
    s = up_mod.summarize(Config())
    assert (s["batches"], s["policy_steps"], s["checkpoint_version"]) == (7, 3, 1)
    assert s["success_rate"] is None and s["components"] == 1


def test_up_summary_reports_dream_apply_rate_and_world_model_fidelity(monkeypatch) -> None:
    text = (
        "# TYPE dynaweb_dream_steps_total counter\n"
        'dynaweb_dream_steps_total{run="r1"} 200\n'
        "# TYPE dynaweb_dream_world_model_invalid_total counter\n"
        'dynaweb_dream_world_model_invalid_total{run="r1",outcome="repaired_or_rejected"} 150\n'
        "# TYPE dynaweb_trainer_world_model_fidelity gauge\n"
        'dynaweb_trainer_world_model_fidelity{run="r1",metric="exact_match"} 0.625\n'
        'dynaweb_trainer_world_model_fidelity{run="r1",metric="baseline_exact_match"} 0.5\n'
    )
    monkeypatch.setattr(up_mod, "scrape_targets", lambda cfg: [(_labels(1), text)])
    s = up_mod.summarize(Config())
    assert s["dream_steps"] == 200 and s["dream_steps_repaired"] == 150
    assert s["dream_apply_rate"] == 0.25
    assert s["wm_fidelity"] == {"exact_match": 0.625, "baseline_exact_match": 0.5}
    line = up_mod.dream_line(s)
    assert "25% of 200 dreamed steps" in line and "0.62 against 0.50" in line
    # the trainer's window of checked transitions, when exported, is what the line reports
    s["wm_fidelity"].update(window_exact_match=0.7, window_baseline_exact_match=0.55, window_n=64)
    assert "0.70 against 0.55 for 'nothing changes' on the trainer's last 64" in up_mod.dream_line(
        s
    )
    monkeypatch.setattr(up_mod, "scrape_targets", lambda cfg: [])
    empty = up_mod.summarize(Config())
    assert empty["dream_apply_rate"] is None and empty["wm_fidelity"] == {}


def test_up_says_what_the_loop_waits_for_until_its_first_updates(monkeypatch) -> None:
    def scrape(*phases: str, pending: int = 0, batches: int = 0, p: int = 0, w: int = 0) -> list:
        text = "# TYPE dynaweb_trainer_waiting gauge\n" + "".join(
            f'dynaweb_trainer_waiting{{run="r1",phase="{ph}"}} {int(ph in phases)}\n'
            for ph in ("models", "checkpoint_v0", "policy_batch", "wm_transitions")
        )
        text += (
            "# TYPE dynaweb_stream_pending_trajectories gauge\n"
            f'dynaweb_stream_pending_trajectories{{run="r1"}} {pending}\n'
            "# TYPE dynaweb_stream_batches_total counter\n"
            f'dynaweb_stream_batches_total{{run="r1"}} {batches}\n'
            "# TYPE dynaweb_trainer_steps_total counter\n"
            f'dynaweb_trainer_steps_total{{run="r1",model="policy"}} {p}\n'
            f'dynaweb_trainer_steps_total{{run="r1",model="world_model"}} {w}\n'
        )
        return [(_labels(1), text)]

    def summary(*args: str, **kw: int) -> dict:
        monkeypatch.setattr(up_mod, "scrape_targets", lambda cfg: scrape(*args, **kw))
        return up_mod.summarize(Config())

    monkeypatch.setattr(up_mod, "scrape_targets", lambda cfg: [])
    assert "metrics endpoint" in up_mod.waiting_for(up_mod.summarize(Config()), 8)
    assert up_mod.waiting_for(summary("models"), 8) == "the trainer loading both models"
    assert "writing version 0" in up_mod.waiting_for(summary("checkpoint_v0"), 8)
    s = summary("policy_batch", "wm_transitions", pending=3)
    text = up_mod.waiting_for(s, 8)
    assert "first policy batch of 8 trajectories" in text and "3 live queued" in text
    assert "world model: its first update: no real steps yet" in text
    s = summary("wm_transitions", batches=2, p=1)
    assert up_mod.waiting_for(s, 8) == "world model: its first update: no real steps yet"
    s = summary(batches=2, p=1, w=1)
    assert up_mod.waiting_for(s, 8) == ""
    firsts: dict = {}
    up_mod.note_firsts(firsts, summary("policy_batch", "wm_transitions"), 5.0)
    up_mod.note_firsts(firsts, summary("wm_transitions", batches=1, p=1), 12.34)
    up_mod.note_firsts(firsts, summary(batches=1, p=2, w=1), 20.0)
    assert firsts == {"first_policy_update_s": 12.3, "first_wm_update_s": 20.0}


# --- dynaweb status ----------------------------------------------------------------------------


class FakeProm:
    """Answers ``up`` with two live targets and one silent one, a collector's heartbeat, and every
    total() query (nothing else) with a value; records the queries."""

    url = "http://prom.test"

    def __init__(self) -> None:
        self.queries: list[str] = []

    def query(self, expr: str, at: float | None = None) -> list[dict]:
        self.queries.append(expr)
        if expr.startswith("up{"):
            return [
                {"metric": {"component": "trainer", "pid": "2"}, "value": [0, "1"]},
                {"metric": {"component": "trainer", "pid": "1"}, "value": [0, "0"]},
                {"metric": {"component": "dream", "pid": "3"}, "value": [0, "1"]},
            ]
        return []

    def by(self, expr: str, label: str, at: float | None = None) -> dict:
        self.queries.append(expr)
        if "heartbeat" in expr:
            return {"collector-a": 1.0}
        return {"collector-a": 40.0} if "last_over_time" in expr else {}

    def value(self, expr: str, at: float | None = None) -> float | None:
        self.queries.append(expr)
        return 128.0 if "last_over_time" in expr else None


def test_status_counts_live_components_and_totals_over_restarts() -> None:
    prom = FakeProm()
    s = gather(prom, "r1")
    assert s["components"] == {
        "trainer": {"up": 1, "not_answering": 1},
        "dream": {"up": 1, "not_answering": 0},
    }
    assert s["real_steps"] == 128 and s["dream"]["steps"] == 128
    assert s["trainer"]["policy_steps"] == 128
    assert s["collectors"]["collector-a"]["episodes"] == 40
    window = f"[{RETENTION}]"
    totals = [q for q in prom.queries if "last_over_time" in q]
    # 4 totals and the dream stale share's 3 (episodes, stale at the mixer and at the trainer)
    assert len(totals) == 7 and all(window in q for q in totals)
    assert s["dream"]["episodes"] == 128 and s["dream"]["stale_share"] == 1.0  # capped at 1
    assert any("dynaweb_collector_episodes_total" in q and "by (collector)" in q for q in totals)
    text = render(s)
    assert "components  dream 1  trainer 1  (registered, not answering: trainer 1)" in text
    assert "(128 total)" in text


# --- dynaweb infra down --only -----------------------------------------------------------------


def _fake_service(stack: Stack, name: str) -> subprocess.Popen:
    """A process recorded in the stack's pid file as if the stack had started ``name``."""
    p = subprocess.Popen(["sleep", "120"], start_new_session=True)
    stack.pids.mkdir(parents=True, exist_ok=True)
    (stack.pids / f"{name}.json").write_text(
        json.dumps({"pid": p.pid, "exe": "sleep", "argv": ["sleep"], "started_at": time.time()})
    )
    return p


def test_infra_down_only_stops_the_named_services(tmp_path: Path, capsys) -> None:
    from infra.commands import cmd_infra

    cfg = _cfg(tmp_path)
    stack = Stack(cfg)
    procs = {n: _fake_service(stack, n) for n in ("prometheus", "broker", "s3")}
    try:
        args = argparse.Namespace(action="down", only=["prometheus"], json=True)
        assert cmd_infra(args, cfg) == 0
        assert json.loads(capsys.readouterr().out) == {"stopped": ["prometheus"]}
        assert procs["prometheus"].poll() is not None  # stopped (and reaped)
        assert procs["broker"].poll() is None and procs["s3"].poll() is None
        assert not (stack.pids / "prometheus.json").exists()
        assert (stack.pids / "broker.json").exists()
        args = argparse.Namespace(action="down", only=["broker", "s3"], json=True)
        assert cmd_infra(args, cfg) == 0
        assert json.loads(capsys.readouterr().out) == {"stopped": ["broker", "s3"]}
        assert procs["broker"].poll() is not None and procs["s3"].poll() is not None
    finally:
        for p in procs.values():
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


def test_infra_only_rejects_unknown_services(tmp_path: Path) -> None:
    from infra.commands import cmd_infra

    args = argparse.Namespace(action="down", only=["promethus"], json=True)
    with pytest.raises(StackError, match="promethus.*s3, broker, taskserver, prometheus"):
        cmd_infra(args, _cfg(tmp_path))
    assert Stack.check_only(None) is None and Stack.check_only([]) is None
    assert Stack.check_only(["s3"]) == ["s3"]


def test_infra_down_only_from_the_command_line(tmp_path: Path, capsys) -> None:
    """``dynaweb infra down --only prometheus`` as typed: the other services keep running, and an
    unknown name is a user error (exit 2), not a silent stop of everything."""
    from infra.cli import main

    cfg = _cfg(tmp_path)
    stack = Stack(cfg)
    procs = {n: _fake_service(stack, n) for n in ("prometheus", "taskserver")}
    try:
        home = ["--home", str(tmp_path)]
        assert main(["infra", "down", "--only", "prometheus", "--json", *home]) == 0
        assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == {
            "stopped": ["prometheus"]
        }
        assert procs["prometheus"].poll() is not None and procs["taskserver"].poll() is None
        assert main(["infra", "down", "--only", "grafana", *home]) == 2
        assert "unknown service(s) grafana" in capsys.readouterr().err
        assert procs["taskserver"].poll() is None
    finally:
        for p in procs.values():
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
