"""The bulk fetch path of the stream worker without a broker: streams.bulk.BulkConsumer's
fetch loop (driven by a fake consumer) and streams.agents.Runner.on_records."""

from __future__ import annotations

import asyncio
from collections import defaultdict, namedtuple
from types import SimpleNamespace

from core.config import load_config
from streams import records
from streams.agents import Runner
from streams.bulk import BulkConsumer
from streams.records import Transition
from streams.state import StreamState
from streams.topics import Topics

TP = namedtuple("TP", "topic partition")
Rec = namedtuple("Rec", "topic partition offset value")


class Flag:
    def __init__(self, value=False):
        self.value = value

    def is_set(self):
        return self.value


class Handler:
    def __init__(self, topics, bulk_max=3):
        self.bulk_topics = frozenset(topics)
        self.bulk_max = bulk_max
        self.calls = []

    def on_records(self, tp, recs, gen):
        self.calls.append(("records", tp, [r.offset for r in recs], gen))

    async def after(self):
        self.calls.append(("after",))


class FakeConsumer:
    """The attributes BulkConsumer._drain_messages uses; serves ``fetches`` in order, then stops."""

    consumer_stopped_errors = (RuntimeError,)

    def __init__(self, handler, fetches, active=None):
        self.app = SimpleNamespace(
            bulk_handler=handler, consumer_generation_id=7, should_stop=False
        )
        self.transport = SimpleNamespace(app=self.app)
        self.fetches = list(fetches)
        self.active = active
        self._stopped = Flag()
        self._read_offset = defaultdict(lambda: None)
        self._buffered_partitions = set()
        self.diag = SimpleNamespace(set_flag=lambda _f: None, unset_flag=lambda _f: None)
        self.should_stop = False
        self.flow_active = True
        self.suspend_flow = asyncio.Event()
        self.seeks = 0
        self.delivered = []  # messages of other topics (Faust's per-message path)

    async def _wait_next_records(self, timeout):
        if not self.fetches:
            self._stopped.value = True
            return None, self.active
        item = self.fetches.pop(0)
        if callable(item):
            item = item(self)
        return item, self.active

    async def sleep(self, _s):
        await asyncio.sleep(0)

    async def perform_seek(self):
        self.seeks += 1

    def _to_message(self, tp, rec):
        return (tp, rec.offset)

    async def callback(self, message):
        self.delivered.append(message)

    async def wait_first(self, *coros):
        first, *rest = coros
        for c in rest:
            c.close()
        await first


def drain(fake):
    asyncio.run(BulkConsumer._drain_messages(fake, SimpleNamespace(_stopped=Flag())))


def recs(tp, offsets):
    return [Rec(tp.topic, tp.partition, o, b"x") for o in offsets]


def test_bulk_topics_come_in_chunks_with_an_output_step_between():
    a, b = TP("dream", 0), TP("real", 1)
    h = Handler(["dream", "real"], bulk_max=3)
    fake = FakeConsumer(h, [{a: recs(a, range(10, 15)), b: recs(b, [3])}])
    drain(fake)
    assert h.calls == [
        ("records", a, [10, 11, 12], 7),
        ("after",),
        ("records", a, [13, 14], 7),
        ("records", b, [3], 7),
        ("after",),
    ]
    assert fake._read_offset[a] == 14 and fake._read_offset[b] == 3


def test_other_topics_take_fausts_per_message_path():
    a, c = TP("dream", 0), TP("other", 0)
    h = Handler(["dream"])
    fake = FakeConsumer(h, [{c: recs(c, [0, 1]), a: recs(a, [5])}])
    drain(fake)
    assert fake.delivered == [(c, 0), (c, 1)]
    assert h.calls == [("records", a, [5], 7), ("after",)]


def test_already_read_offsets_inactive_partitions_and_a_stopped_flow_deliver_nothing():
    a, b = TP("dream", 0), TP("dream", 1)
    h = Handler(["dream"], bulk_max=100)
    fake = FakeConsumer(h, [{a: recs(a, [4, 5, 6]), b: recs(b, [0])}], active={a})
    fake._read_offset[a] = 5  # after a seek to the committed offset 5
    drain(fake)
    assert h.calls == [("records", a, [5, 6], 7), ("after",)]  # b is paused

    def stop_flow(f):
        f.flow_active = False
        return {a: recs(a, [7])}

    fake = FakeConsumer(h, [stop_flow])
    h.calls.clear()
    drain(fake)
    assert h.calls == [] and fake.seeks == 1


def test_no_handler_falls_back_to_fausts_loop(monkeypatch):
    called = []

    async def original(self, fetcher):
        called.append(self)

    monkeypatch.setattr("streams.bulk.drv.Consumer._drain_messages", original)
    fake = FakeConsumer(None, [])
    drain(fake)
    assert called == [fake]


def _t(ep: str, step: int, done: bool) -> bytes:
    obs = {"instruction": "i", "tree": f"p{step}"}
    return records.encode(
        Transition(
            run_id="u",
            episode_id=ep,
            step=step,
            task="x",
            seed=1,
            source="dream",
            policy_version=0,
            world_model_version=0,
            obs=obs,
            action="click(1)",
            next_obs=obs,
            reward=0.0,
            done=done,
            group_id="g",
        )
    )


def test_runner_keeps_records_while_frozen_and_drops_an_earlier_generation():
    env = {
        "DYNAWEB_RUN_ID": "u",
        "DYNAWEB_STREAM__WORKER_ID": "w1",
        "DYNAWEB_STREAM__GROUP_SIZE": "2",
    }
    cfg = load_config(env=env)
    topics = Topics("u")
    app = SimpleNamespace(consumer_generation_id=2)
    r = Runner(app, cfg, topics, StreamState(cfg, topics, clock=lambda: 0.0), None, None)
    tp = TP(topics.dream, 0)
    batch = [Rec(tp.topic, 0, 0, _t("a", 0, False)), Rec(tp.topic, 0, 1, _t("a", 1, True))]
    r.on_records(tp, batch, 2)  # frozen until the first assignment is prepared
    assert r.state.counts["t_dream"] == 0 and r.early
    r.frozen = False
    r.on_records(tp, batch, 1)  # fetched under an earlier assignment: re-read from the commit point
    assert r.state.counts["t_dream"] == 0
    early, r.early = r.early, []
    for kind, item in early:
        assert kind == "records"
        r.on_records(*item)
    assert r.state.counts["t_dream"] == 2
    assert r.state.positions[tp] == 2 and r.state.commit_points() == {tp: 0}  # "a" is held
