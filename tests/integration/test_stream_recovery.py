"""Crash recovery and several workers, on a real broker (Tansu), with the
worker as a real subprocess (helpers from tests/support.py, the broker fixture from
tests/integration/conftest.py; with CI=true a broker that cannot start fails).

Transitions are produced step by step, round robin over many episodes, so at
any moment many real and dream episodes are half assembled. Downstream dedupe
is the trainer's: by ``batch_id``.
"""

from __future__ import annotations

import json
import signal
import threading
import uuid

import pytest

from streams import records
from streams.records import Transition
from tests.factories import transition
from tests.support import Producer as _Producer
from tests.support import Reader, Worker, wait_for

pytestmark = pytest.mark.integration

CFG = dict(
    group_size=4,
    batch_trajectories=8,
    expert_fraction=0.5,
    cold_start_batch_s=3600,
    group_timeout_s=300,
    episode_idle_timeout_s=300,
    samples_per_insert=0,
    heldout_fraction=0.0,
    reuse_wait_s=0.5,
)
STEPS = 3


def groups_of(run: str, source: str, n: int, seed0: int) -> list[list[list[Transition]]]:
    """n groups of 4 episodes sharing a group id, named at the source (the dream generator, or the collector
    that ran a live group's rollouts of one task+seed)."""
    out = []
    for g in range(n):
        gid = f"g-{uuid.uuid4().hex[:8]}"
        eps = []
        for _ in range(4):
            ep = f"{source}-{uuid.uuid4().hex[:12]}"
            eps.append(
                [
                    transition(run, ep, i, source, i == STEPS - 1, group=gid, seed=seed0 + g)
                    for i in range(STEPS)
                ]
            )
        out.append(eps)
    return out


class Producer(_Producer):
    def send_t(self, t: Transition) -> None:
        key = (
            t.group_id or t.episode_id
        ).encode()  # by group, as the producers key them: one worker per group
        self.p.send(self.t.name(t.source), value=records.encode(t), key=key)

    def round_robin(
        self,
        groups: list,
        stop_after: threading.Event | None = None,
        pause: threading.Event | None = None,
        at: int = 0,
    ) -> None:
        """Step i of every episode, then step i+1 ...: everything is in progress at once.
        Sets ``stop_after`` after ``at`` messages and waits on ``pause`` there."""
        eps = [ep for g in groups for ep in g]
        n = 0
        for i in range(STEPS):
            for ep in eps:
                self.send_t(ep[i])
                n += 1
                if stop_after is not None and n == at:
                    self.p.flush()
                    stop_after.set()
                    pause.wait(120)
        self.p.flush()


def experts(run: str, n: int) -> list[list[Transition]]:
    ids = [f"expert-{uuid.uuid4().hex[:12]}" for _ in range(n)]
    return [[transition(run, ep, i, "expert", i == STEPS - 1) for i in range(STEPS)] for ep in ids]


def batches(reader: Reader) -> list:
    return [records.decode(m.value, expect="training_batch") for m in reader.poll()]


def check_batches(bs: list, groups: list) -> dict:
    """After dedupe by batch_id: every non-expert episode exactly once, whole, in a
    batch with the configured fraction; returns {batch_id: worker_id}."""
    by_id = {}
    for b in bs:
        by_id.setdefault(b.batch_id, b)
    seen: dict[str, int] = {}
    for b in by_id.values():
        ts = b.trajs()
        n_e = sum(t.source == "expert" for t in ts)
        assert b.kind == "mixed" and len(ts) == 8 and n_e == 4 and b.expert_fraction == 0.5
        for t in ts:
            if t.source != "expert":
                seen[t.episode_id] = seen.get(t.episode_id, 0) + 1
                assert [s["step"] for s in t.transitions] == list(range(STEPS)), "a lost step"
                assert not t.truncated
    want = {ep[0].episode_id for g in groups for ep in g}
    assert set(seen) == want, f"lost {len(want - set(seen))} episodes"
    twice = {k: v for k, v in seen.items() if v > 1}
    assert not twice, f"{len(twice)} trajectories emitted twice after dedupe"
    return {k: b.worker_id for k, b in by_id.items()}


@pytest.fixture
def run_id() -> str:
    return f"trec-{uuid.uuid4().hex[:8]}"


def test_sigkill_mid_stream_loses_nothing_and_emits_nothing_twice(bootstrap, run_id, tmp_path):
    w = Worker(bootstrap, tmp_path, run_id, **CFG).start()
    p = Producer(bootstrap, run_id)
    wm = br = None
    try:
        for ep in experts(run_id, 12):
            for t in ep:
                p.send_t(t)
        p.p.flush()
        wait_for(
            lambda: w.metric("dynaweb_stream_expert_pool_trajectories") == 12, 30, "pool of 12"
        )
        before = wait_for(
            lambda: (s := w.state()) and s["expert_pool"] == 12 and s, 10, "state.json"
        )
        groups = groups_of(run_id, "dream", 16, 100) + groups_of(run_id, "real", 4, 500)
        # first half: every episode gets its steps 0 and part of 1; some groups are completed
        half, resume = threading.Event(), threading.Event()
        th = threading.Thread(target=p.round_robin, args=(groups, half, resume, 80 * 2 - 10))
        th.start()
        wait_for(half.is_set, 60, "the first half produced")
        done = [ep for g in groups[:6] for ep in g]  # finish 6 groups so that batches go out
        for ep in done:
            p.send_t(ep[2])
        p.p.flush()
        br = Reader(bootstrap, w.topics_name("policy_batches"))
        br.until(lambda rs: len(rs) >= 2, 60, "batches before the crash")
        wait_for(lambda: w.metric("dynaweb_stream_held_messages") > 0, 10, "held messages")
        w.stop(signal.SIGKILL)
        resume.set()
        th.join(60)
        for ep in done:  # a redelivery of what was already sent
            p.send_t(ep[2])
        p.p.flush()
        w.start()
        after = json.loads((w.dir / "rebuild.json").read_text())
        assert after["expert_pool"] == before["expert_pool"] == 12  # rebuilt before ready
        assert after["expert_pool_sha1"] == before["expert_pool_sha1"]  # the same expert pool
        want = len(groups)
        wait_for(
            lambda: len({b.batch_id for b in batches(br)}) >= want, 90, f"{want} distinct batches"
        )
        check_batches(batches(br), groups)
        # no real transition lost on its way to the world model (dedupe by key downstream)
        wm = Reader(bootstrap, w.topics_name("world_model"))
        real = {
            (ep[0].episode_id, i)
            for g in groups
            if g[0][0].source == "real"
            for ep in g
            for i in range(STEPS)
        }

        def keys():
            return {(d["episode_id"], d["step"]) for d in (json.loads(m.value) for m in wm.poll())}

        wait_for(lambda: real <= keys(), 30, "every real transition forwarded")
    finally:
        for r in (br, wm):
            if r is not None:
                r.close()
        p.close()
        w.stop()


def test_two_workers_split_the_stream_and_each_batch_keeps_the_fraction(
    bootstrap,
    run_id,
    tmp_path,
):
    w1 = Worker(bootstrap, tmp_path, run_id, **CFG)
    w2 = Worker(bootstrap, tmp_path, run_id, **CFG)
    w2.rename(w1.worker_id + "b")
    p = Producer(bootstrap, run_id)
    br = None
    try:
        w1.start()
        for ep in experts(run_id, 12):
            for t in ep:
                p.send_t(t)
        p.p.flush()
        first = groups_of(run_id, "dream", 8, 100)
        p.round_robin(first)
        w2.start()  # joins mid-stream: partitions move from w1 to w2
        second = groups_of(run_id, "dream", 16, 200)
        p.round_robin(second)
        for w in (w1, w2):  # both see every expert (read outside the group)
            wait_for(
                lambda w=w: w.metric("dynaweb_stream_expert_pool_trajectories") == 12, 30, "pools"
            )
        br = Reader(bootstrap, w1.topics_name("policy_batches"))
        want = len(first) + len(second)
        wait_for(
            lambda: len({b.batch_id for b in batches(br)}) >= want, 90, f"{want} distinct batches"
        )
        makers = check_batches(batches(br), first + second)
        late = {
            b.batch_id
            for b in batches(br)
            if any(t["group_id"] in {g[0][0].group_id for g in second} for t in b.trajectories)
        }
        assert {makers[b] for b in late} == {w1.worker_id, w2.worker_id}, (
            "both workers made batches"
        )
    finally:
        if br is not None:
            br.close()
        p.close()
        w1.stop()
        w2.stop()
