"""A collector joins a running system; a killed Chromium is recovered.

Join: on the real stack, with a stream worker process and one expert collector
process already producing training batches, a second collector process is
started (nothing else restarted).  Its transitions (``producer_id`` = its id)
must show up inside ``TrainingBatch`` records on the policy batch topic, and
its announce and heartbeat records on the collectors topic.

Crash: Chromium's browser process is killed (SIGKILL) in the middle of an
episode; the collector relaunches it, the episode in flight is published as
truncated (never as a success) and collection goes on.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import psutil
import pytest

from collectors.agents import ExpertAgent
from collectors.browser import Browser
from collectors.collector import CollectorStats, run_collector
from core.config import Config
from streams import records
from streams.kafka import is_control, read_until_sentinel
from streams.topics import Topics
from tests.integration.conftest_collectors import require_chromium
from tests.support import env_for, wait_for

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


class Proc:
    def __init__(self, name: str, cfg: Config, args: list[str], log_dir: Path, **env: str):
        self.name = name
        self.log = log_dir / f"{name}.log"
        self._fh = open(self.log, "wb")
        self.p = subprocess.Popen(
            [sys.executable, "-m", "infra.cli", *args],
            cwd=ROOT,
            env=env_for(cfg, **env),
            stdout=self._fh,
            stderr=subprocess.STDOUT,
        )

    def alive(self) -> bool:
        if self.p.poll() is not None:
            raise AssertionError(f"{self.name} exited {self.p.returncode}: {self.tail()}")
        return True

    def tail(self, n: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-n:]

    def stop(self) -> None:
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(30)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait(10)
        self._fh.close()


def _decoded(cfg: Config, topic: str) -> list:
    out = []
    for _m, raw in read_until_sentinel(cfg.kafka, topic, cfg.run_id, timeout=30):
        if raw and not (is_control(raw) and b'"sentinel"' in raw[:300]):
            out.append(records.decode(raw))
    return out


def _producers_in_batches(cfg: Config, topics: Topics) -> set[str]:
    seen = set()
    for b in _decoded(cfg, topics.policy_batches):
        if isinstance(b, records.TrainingBatch):
            for traj in b.trajectories:
                seen.update(t["producer_id"] for t in traj["transitions"])
    return seen


def test_second_collector_joins_a_running_system(run_cfg: Config, tmp_path: Path) -> None:
    require_chromium()
    topics = Topics(run_cfg.run_id, run_cfg.kafka.partitions)
    wid = "w-" + uuid.uuid4().hex[:6]
    first, second = "first-" + uuid.uuid4().hex[:6], "second-" + uuid.uuid4().hex[:6]
    ready = Path(run_cfg.home) / "streams" / run_cfg.run_id / wid / "ready"
    procs: list[Proc] = []
    try:
        worker = Proc("worker", run_cfg, ["stream-worker"], tmp_path, DYNAWEB_STREAM__WORKER_ID=wid)
        procs.append(worker)
        wait_for(lambda: worker.alive() and ready.exists(), 120, "the stream worker to be ready")
        c1 = Proc(
            "c1",
            run_cfg,
            [
                "collect",
                "--policy",
                "expert",
                "--contexts",
                "1",
                "--tasks",
                "miniwob/click-button",
                "--id",
                first,
                "--set",
                "collector.max_steps_per_s=4",
            ],
            tmp_path,
        )
        procs.append(c1)
        wait_for(
            lambda: c1.alive() and first in _producers_in_batches(run_cfg, topics),
            180,
            "the first collector's transitions in training batches",
            every=2.0,
        )
        worker_pid, c1_pid = worker.p.pid, c1.p.pid

        c2 = Proc(
            "c2",
            run_cfg,
            [
                "collect",
                "--policy",
                "expert",
                "--contexts",
                "1",
                "--tasks",
                "miniwob/click-link",
                "--id",
                second,
                "--set",
                "collector.max_steps_per_s=4",
            ],
            tmp_path,
        )
        procs.append(c2)
        wait_for(
            lambda: (
                c2.alive() and worker.alive() and second in _producers_in_batches(run_cfg, topics)
            ),
            180,
            "the second collector's transitions in training batches",
            every=2.0,
        )

        def control_kinds() -> set[str]:
            return {
                c.kind
                for c in _decoded(run_cfg, topics.collectors)
                if isinstance(c, records.Control) and c.sender == second
            }

        kinds = wait_for(
            lambda: {"announce", "heartbeat"} <= control_kinds(),
            60,
            "the second collector's announce and heartbeat",
            every=1.0,
        )
        assert kinds
        # nothing else was restarted
        assert worker.alive() and c1.alive() and worker.p.pid == worker_pid and c1.p.pid == c1_pid
        batches = [
            b
            for b in _decoded(run_cfg, topics.policy_batches)
            if isinstance(b, records.TrainingBatch)
        ]
        mine = [
            t
            for b in batches
            for traj in b.trajectories
            for t in traj["transitions"]
            if t["producer_id"] == second
        ]
        assert mine and all(
            t["task"] == "miniwob/click-link" and t["source"] == "expert" for t in mine
        )
    finally:
        for p in reversed(procs):
            p.stop()


# --- a killed Chromium ----------------------------------------------------------


def _chromium_browser_pids() -> set[int]:
    """Chromium browser processes (not renderers) started by this test process."""
    out = set()
    for p in psutil.Process().children(recursive=True):
        try:
            cmd = p.cmdline()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if (
            cmd
            and "chrom" in os.path.basename(cmd[0])
            and "--remote-debugging-pipe" in cmd
            and not any(a.startswith("--type=") for a in cmd)
        ):
            out.add(p.pid)
    return out


class _Pub:
    def __init__(self) -> None:
        self.sent: list = []

    def send(self, topic: str, rec, key: str | None = None) -> None:
        self.sent.append((topic, records.encode(rec)))


class KillingExpert(ExpertAgent):
    """Kills Chromium just before the second step of the second episode is performed."""

    def __init__(self, pids: callable) -> None:
        super().__init__()
        self.pids = pids
        self.starts = 0
        self.killed: list[int] = []

    async def act(self, obs_list, histories, tasks=None):
        out = await super().act(obs_list, histories, tasks)
        self.starts += sum(1 for h in histories if not h)
        if self.starts >= 2 and not self.killed and any(len(h) == 1 for h in histories):
            self.killed = sorted(self.pids())
            assert len(self.killed) == 1, self.killed
            try:
                proc = psutil.Process(self.killed[0])
            except psutil.NoSuchProcess:  # gone between listing and killing
                return out
            os.kill(proc.pid, signal.SIGKILL)
            psutil.wait_procs([proc], timeout=10)
        return out


def test_killed_chromium_is_recovered_and_the_episode_is_truncated(bl) -> None:
    cfg = Config(run_id="t-kill")
    cfg.collector.contexts = 1
    cfg.collector.max_episodes = 5
    cfg.collector.tasks = ["miniwob/login-user"]  # three steps: type, type, click
    pub, topics, stats = _Pub(), Topics(cfg.run_id), CollectorStats()
    before = _chromium_browser_pids()  # the shared test browser is left alone

    async def go():
        browser = Browser(allowed_origins=[bl.base_url])
        await browser.start()
        agent = KillingExpert(lambda: _chromium_browser_pids() - before)
        try:
            st = await run_collector(
                cfg,
                pub,
                topics,
                lambda: agent,
                asyncio.Event(),
                collector_id="c-kill",
                base_url=bl.base_url,
                stats=stats,
                seed_offset=0,
                browser=browser,
            )
            return st, agent, browser.launches
        finally:
            await browser.close()

    st, agent, launches = bl.run(go(), timeout=300)
    assert agent.killed and launches == 2 and st.crashes == 1 and st.episodes == 5
    trans = [records.decode(raw) for t, raw in pub.sent if t == topics.expert]
    eps: dict = {}
    for r in trans:
        eps.setdefault(r.episode_id, []).append(r)
    crashed = [ep for ep, ts in eps.items() if any(t.info.get("crashed") for t in ts)]
    assert len(crashed) == 1
    ts = sorted(eps[crashed[0]], key=lambda t: t.step)
    last = ts[-1]
    assert (
        [t.step for t in ts] == [0, 1] and last.truncated and not last.done and last.reward == 0.0
    )
    assert not any(t.reward > 0 or t.done for t in ts)
    # the other episodes (before and after the crash) are successes
    others = [max(v, key=lambda t: t.step) for ep, v in eps.items() if ep != crashed[0]]
    assert len(others) == 4 and all(t.done and t.reward == 1.0 for t in others)
    assert max(t.created_at for t in others) > last.created_at  # collection went on after the crash
