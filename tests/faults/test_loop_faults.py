"""Faults of a running loop: Prometheus stopped, and each component killed with SIGKILL.

``dynaweb up --no-stack`` runs the loop on the shared stack (the settings of tests/e2e/test_up.py:
small batches, a checkpoint every 2 policy steps), one loop for this module's tests.  Once every
component makes progress:

- Prometheus is stopped for ``OUTAGE_S``: the components keep running and publishing (their own
  counters, scraped directly, go on rising and their publishers stay healthy), ``dynaweb status``
  fails saying Prometheus is unreachable and how to start it, and answers again within
  ``RECOVERY_S`` of Prometheus' restart;
- the stream worker, the trainer, the dream generator and the expert collector are killed in turn
(SIGKILL to the process group the supervisor started): each must be restarted by the supervisor
(a new process registers its metrics target) and the new process must make progress (stream:
transitions consumed; trainer: an optimizer step; dream: a dreamed transition published;
collector: a browser step) within ``RECOVERY_S`` of the kill.  The new process counts from 0,
so its own counters show the progress.

On the quiet 2-core machine the restarted processes made progress 12-41 s after their kill (the
dream generator is the slowest: its first checkpoint load imports transformers, then a dream
round must finish); docs/reliability.md, "Fault-injection suite".
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from core.config import Config
from infra.chaos import PROGRESS, counter, progressing, target
from infra.stack import Stack
from tests.factories import UP_SETTINGS
from tests.faults.harness import OUTAGE_S, RECOVERY_S, report
from tests.support import env_for, fresh_run

pytestmark = pytest.mark.faults

WARMUP_S = 300


class Loop:
    def __init__(self, cfg: Config, up: subprocess.Popen, out: Path):
        self.cfg, self.up, self.out = cfg, up, out

    def wait(self, cond, timeout: float, what: str):
        deadline = time.time() + timeout
        while time.time() < deadline:
            assert self.up.poll() is None, f"up exited {self.up.returncode}: {self.tail()}"
            v = cond()
            if v:
                return v
            time.sleep(1)
        raise AssertionError(f"{what} not within {timeout:.0f}s; up's output: {self.tail()}")

    def tail(self) -> str:
        return self.out.read_text()[-3000:]

    def progress(self, component: str) -> float:
        entry = target(self.cfg, component)
        return counter(entry, PROGRESS[component][1]) if entry else 0.0


@pytest.fixture(scope="module")
def loop(stack: Config, tmp_path_factory: pytest.TempPathFactory):
    cfg = fresh_run(stack, "faults")
    out = tmp_path_factory.mktemp("up") / "up.out"
    env = env_for(cfg, **UP_SETTINGS)
    with open(out, "w") as fh:
        up = subprocess.Popen(
            [sys.executable, "-m", "infra.cli", "up", "--no-stack", "--duration", "900", "--json"],
            env=env,
            stdout=fh,
            stderr=subprocess.STDOUT,
        )
    lp = Loop(cfg, up, out)
    try:
        t0 = time.time()
        for comp in PROGRESS:
            lp.wait(lambda c=comp: progressing(cfg, c), WARMUP_S - (time.time() - t0), comp)
        report("loop warm-up", seconds=round(time.time() - t0, 1))
        yield lp
    finally:
        up.send_signal(signal.SIGTERM)
        try:
            up.wait(90)
        except subprocess.TimeoutExpired:
            up.kill()
            up.wait(10)


def _status(cfg: Config) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "infra.cli", "status"],
        env=env_for(cfg),
        capture_output=True,
        text=True,
        timeout=60,
    )


def _publishers_healthy(lp: Loop) -> bool:
    for comp in ("collector", "trainer", "dream"):
        entry = target(lp.cfg, comp)
        if entry is None or counter(entry, "dynaweb_client_publisher_healthy") < 1:
            return False
    return True


@pytest.mark.timeout(WARMUP_S + 300)  # the module's loop starts in this test's setup
def test_prometheus_stopped(loop: Loop) -> None:
    cfg = loop.cfg
    before = {c: loop.progress(c) for c in PROGRESS}
    stack = Stack(cfg)
    assert stack.down(only=["prometheus"]) == ["prometheus"]
    stopped = time.time()
    try:
        time.sleep(OUTAGE_S)
        st = _status(cfg)
        assert st.returncode == 2, (st.returncode, st.stdout, st.stderr)
        assert "not reachable" in st.stderr and "dynaweb infra up" in st.stderr, st.stderr
        during = {c: loop.progress(c) for c in PROGRESS}
        assert loop.up.poll() is None, "up exited while Prometheus was down"
        # every component kept working and publishing (its own counters, scraped directly)
        stalled = [c for c in PROGRESS if during[c] <= before[c]]
        assert not stalled, (stalled, before, during)
        assert _publishers_healthy(loop), "a publisher unhealthy while Prometheus was down"
    finally:
        stack.up(only=["prometheus"])
    back = time.time()
    loop.wait(lambda: _status(cfg).returncode == 0, RECOVERY_S, "status answering again")
    report(
        "prometheus stopped",
        outage_s=round(back - stopped, 1),
        status_back_s=round(time.time() - back, 1),
        progress_during={c: during[c] - before[c] for c in PROGRESS},
    )


@pytest.mark.timeout(420)
def test_each_component_killed_is_restarted_and_progresses(loop: Loop) -> None:
    cfg = loop.cfg
    measured = {}
    for comp in PROGRESS:
        loop.wait(lambda c=comp: progressing(cfg, c), RECOVERY_S, f"{comp} progressing")
        pid = int(target(cfg, comp)["labels"]["pid"])
        os.killpg(pid, signal.SIGKILL)  # the supervisor started it in its own process group
        killed = time.time()
        loop.wait(
            lambda c=comp, p=pid: progressing(cfg, c, not_pid=p),
            RECOVERY_S,
            f"{comp} restarted and progressing after SIGKILL",
        )
        measured[comp] = round(time.time() - killed, 1)
    out = loop.out.read_text()
    restarts = {
        name: out.count(f"[up] {name} exited with -9")
        for name in ("stream-worker", "trainer", "dream-0", "collector-expert")
    }
    report("component SIGKILL", recovery_s=measured, restarts=restarts)
    assert all(n == 1 for n in restarts.values()), restarts


@pytest.mark.timeout(400)
def test_chaos_command_reports_the_soak(loop: Loop, tmp_path: Path) -> None:
    """``dynaweb chaos`` on the running loop, two faults: its report is complete and true."""
    cfg = loop.cfg
    rep_file = tmp_path / "chaos.json"
    argv = [sys.executable, "-m", "infra.cli", "chaos", "--duration", "60", "--every", "30"]
    argv += ["--faults", "s3-stall,kill-dream", "--outage", "8", "--warmup", "120"]
    argv += ["--report", str(rep_file), "--json"]
    res = subprocess.run(argv, env=env_for(cfg), capture_output=True, text=True, timeout=360)
    assert res.returncode in (0, 1), res.stderr[-3000:]
    rep = json.loads(res.stdout.strip().splitlines()[-1])
    report("dynaweb chaos", **{k: rep[k] for k in ("faults", "probe", "topics", "restarts")})
    assert rep == json.loads(rep_file.read_text())
    assert [e["fault"] for e in rep["faults"]] == ["s3-stall", "kill-dream"], rep["faults"]
    assert all(e["ok"] and e["recovery_s"] <= RECOVERY_S for e in rep["faults"]), rep["faults"]
    assert rep["faults"][0]["outage_s"] >= 8
    assert rep["probe"]["missing"] == 0 and rep["probe"]["acked"] == rep["probe"]["sent"] > 0
    # the components' own acknowledgements, found again by an independent reader
    real = [t for name, t in rep["topics"].items() if name.endswith(".real")]
    assert real and real[0]["acked"] > 0 and real[0]["complete"], rep["topics"]
    assert all(t["distinct"] >= t["acked"] for t in rep["topics"].values()), rep["topics"]
    dream = [cid for cid in rep["restarts"] if cid.startswith("dream")]
    assert len(dream) == 1 and rep["restarts"][dream[0]] >= 1, rep["restarts"]
    collector = [m for cid, m in rep["memory"].items() if cid.startswith("collector-expert")]
    assert collector and collector[0]["max_mb"] > 100, rep["memory"]  # Chromium counted
    assert rep["checkpoints"]["last_version"] >= rep["checkpoints"]["first_version"] >= 0
    assert rep["ok"] is True and res.returncode == 0, rep
