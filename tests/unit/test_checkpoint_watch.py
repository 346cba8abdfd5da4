"""Unit tests for streams.checkpoints: the one announcement sender and the one watcher (no broker)."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest
from kafka import TopicPartition

from core.config import KafkaConfig
from streams import checkpoints as sc
from streams import records
from streams.kafka import sentinel

TOPIC = "dynaweb.t.checkpoints"


def _ann(kind: str, version: int) -> bytes:
    return records.encode(records.CheckpointAnnouncement("t", kind, version, "s3://b/x", "ab" * 32))


class _Pub:
    def __init__(self):
        self.sent: list = []

    def send(self, topic, rec, key=None, headers=None):
        self.sent.append((topic, rec))


class _Consumer:
    """Serves ``batches`` (a dict per poll, or an exception to raise), then nothing."""

    def __init__(self, batches):
        self.batches = list(batches)
        self.assigned: list = []
        self.sought: tuple = ()
        self.closed = False

    def assign(self, tps):
        self.assigned = list(tps)

    def seek_to_beginning(self, *tps):
        self.sought = tps

    def poll(self, timeout_ms=0):
        if self.batches:
            b = self.batches.pop(0)
            if isinstance(b, Exception):
                raise b
            return b
        time.sleep(0.005)
        return {}

    def close(self):
        self.closed = True


def _msgs(*values):
    return {
        TopicPartition(TOPIC, 0): [SimpleNamespace(offset=i, value=v) for i, v in enumerate(values)]
    }


def test_send_announcement_builds_the_record_and_does_not_flush() -> None:
    pub = _Pub()
    rec = sc.send_announcement(pub, TOPIC, "t", "policy", 3, "s3://b/p/3", "f" * 64)
    assert pub.sent == [(TOPIC, rec)]
    assert (rec.run_id, rec.kind, rec.version, rec.uri, rec.manifest_sha256) == (
        "t",
        "policy",
        3,
        "s3://b/p/3",
        "f" * 64,
    )
    assert records.decode(records.encode(rec), expect="checkpoint") == rec


def test_announcement_of_skips_everything_but_wanted_announcements() -> None:
    assert sc.announcement_of(_ann("policy", 1)).version == 1
    assert sc.announcement_of(_ann("world_model", 2), ("policy",)) is None
    assert sc.announcement_of(None) is None
    assert sc.announcement_of(b"not json") is None
    assert sc.announcement_of(records.encode(sentinel("t", "x"))) is None


def test_watcher_hands_over_wanted_announcements_and_closes(monkeypatch) -> None:
    consumer = _Consumer([_msgs(_ann("policy", 0), b"junk", None, _ann("world_model", 0))])
    opened: list = []
    monkeypatch.setattr(sc, "make_consumer", lambda kc, **kw: opened.append(kw) or consumer)
    got: list = []
    done = threading.Event()

    def on_ann(rec):
        got.append((rec.kind, rec.version))
        done.set()

    w = sc.CheckpointWatcher(
        KafkaConfig(), [TOPIC], on_announcement=on_ann, kinds=("policy",), partitions=(0,)
    )
    w.start()
    assert done.wait(5)
    w.stop()
    assert got == [("policy", 0)]
    assert consumer.assigned == [TopicPartition(TOPIC, 0)] and consumer.sought == (
        TopicPartition(TOPIC, 0),
    )
    assert consumer.closed and w.error is None
    w.check()
    # the embedded broker holds an empty fetch for the whole wait: an announcement waits <= 100 ms
    assert (
        opened == [{"fetch_max_wait_ms": sc.WATCH_FETCH_WAIT_MS}] and sc.WATCH_FETCH_WAIT_MS <= 100
    )


def test_watcher_raw_values_assigned_hook_and_errors(monkeypatch) -> None:
    consumer = _Consumer([_msgs(b"a", None), RuntimeError("broker gone")])
    monkeypatch.setattr(sc, "make_consumer", lambda kc, **kw: consumer)
    values: list = []
    assigned: list = []
    w = sc.CheckpointWatcher(
        KafkaConfig(),
        [TOPIC],
        on_value=lambda t, p, o, raw: values.append((t, p, o, raw)),
        partitions=(0,),
        on_assigned=assigned.append,
        connect_in_thread=True,
        poll_ms=1,
    )
    w.start()
    w._thread.join(5)
    assert values == [(TOPIC, 0, 0, b"a"), (TOPIC, 0, 1, None)]
    assert assigned == [[TopicPartition(TOPIC, 0)]]
    assert isinstance(w.error, RuntimeError) and consumer.closed
    with pytest.raises(RuntimeError, match="broker gone"):
        w.check()


def test_watcher_wants_exactly_one_handler() -> None:
    with pytest.raises(ValueError):
        sc.CheckpointWatcher(KafkaConfig(), [TOPIC])
    with pytest.raises(ValueError):
        sc.CheckpointWatcher(
            KafkaConfig(), [TOPIC], on_announcement=print, on_value=lambda *a: None
        )
