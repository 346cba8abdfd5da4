"""Outage-tolerant checkpoints without services (fakes): the trainer's writer retries an upload
and an announcement with back-off instead of failing, counts every failed attempt, re-sends an
announcement the publisher gave up; readers poll LATEST, so a lost announcement only delays a
reload; a collector whose publishes fail withholds its heartbeat."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import urllib3
from kafka.errors import KafkaTimeoutError

from collectors import metrics as CM
from collectors.run import liveness_beat
from models import metrics as M
from models.checkpoints.reader import ModelSlot
from models.checkpoints.store import Saved
from models.checkpoints.writer import CheckpointWriter, retry
from streams import records
from streams.kafka import PublisherDead, PublishLost

FAST = (0.001, 0.002)


def _count(metric, *labels) -> float:
    return metric.labels(*labels)._value.get()


class FlakyStore:
    """``save`` fails ``fail_saves`` times (S3 down), then writes LATEST like the real store."""

    def __init__(self, fail_saves: int = 0):
        self.fail_saves = fail_saves
        self.saves: list = []
        self.latest_of: dict = {}

    def save(self, kind, version, local_dir, config, offsets, extra=None, set_latest=True):
        if self.fail_saves:
            self.fail_saves -= 1
            raise urllib3.exceptions.MaxRetryError(None, "/", "connection refused")
        self.saves.append((kind, version, set_latest))
        if set_latest:
            self.latest_of[kind] = {"version": version, "manifest_sha256": f"sha-{version}"}
        return Saved(kind, version, f"s3://b/{kind}/{version}/", f"sha-{version}")

    def latest(self, kind):
        return self.latest_of.get(kind)

    def prune(self, kind, keep):
        raise OSError("S3 stalls")


class FlakyPub:
    """``flush`` raises the queued outcomes one by one, then succeeds."""

    def __init__(self, outcomes=()):
        self.outcomes = list(outcomes)
        self.sent: list = []
        self.flushes = 0

    def send(self, topic, rec, key=None, headers=None):
        self.sent.append((topic, rec))

    def flush(self, timeout=30.0):
        self.flushes += 1
        if self.outcomes:
            raise self.outcomes.pop(0)


def _writer(store, pub, run, stop=None) -> CheckpointWriter:
    return CheckpointWriter(
        store, pub, "dynaweb.r.checkpoints", run, stop or threading.Event(), backoff_s=FAST
    )


def test_upload_is_retried_with_backoff_until_s3_answers(tmp_path: Path) -> None:
    run = "r-upload"
    store, pub = FlakyStore(fail_saves=3), FlakyPub()
    w = _writer(store, pub, run)
    saved = w.upload("policy", 4, tmp_path, {}, {}, {}, set_latest=True)
    assert saved.version == 4 and store.saves == [("policy", 4, True)]
    assert store.latest("policy")["version"] == 4  # LATEST written before any announcement
    assert _count(M.TRAINER_CKPT_RETRIES, run, "upload") == 3


def test_announcement_flush_is_retried_and_a_lost_announcement_sent_again() -> None:
    run = "r-announce"
    pub = FlakyPub([KafkaTimeoutError("broker away"), PublishLost("gave up"), KafkaTimeoutError()])
    w = _writer(FlakyStore(), pub, run)
    w.announce(Saved("policy", 7, "s3://b/p/7/", "sha-7"))
    w.announce(Saved("world_model", 7, "s3://b/w/7/", "sha-7"))
    w.flush()
    assert pub.flushes == 4 and not w.unflushed
    assert _count(M.TRAINER_CKPT_RETRIES, run, "announce") == 3
    sent = [(rec.kind, rec.version) for _t, rec in pub.sent]
    assert sent == [("policy", 7), ("world_model", 7)] * 2  # sent again after PublishLost
    assert all(isinstance(rec, records.CheckpointAnnouncement) for _t, rec in pub.sent)


def test_a_dead_publisher_is_not_retried() -> None:
    pub = FlakyPub([PublisherDead("gone for 300 s")])
    w = _writer(FlakyStore(), pub, "r-dead")
    w.announce(Saved("policy", 1, "u", "s"))
    with pytest.raises(PublisherDead):
        w.flush()


def test_retry_gives_up_with_the_last_error_once_stopped() -> None:
    stop = threading.Event()
    calls = []

    def fail():
        calls.append(1)
        if len(calls) == 2:
            stop.set()
        raise OSError("down")

    with pytest.raises(OSError):
        retry(fail, what="x", stop=stop, retry_on=(OSError,), backoff_s=FAST)
    assert len(calls) == 2
    with pytest.raises(ValueError):  # not a retried type: raised at once
        retry(lambda: int("x"), what="y", stop=threading.Event(), retry_on=(OSError,))


def test_a_failed_prune_is_counted_and_skipped() -> None:
    w = _writer(FlakyStore(), FlakyPub(), "r-prune")
    w.prune(keep=2)
    assert _count(M.TRAINER_CKPT_RETRIES, "r-prune", "prune") == 2  # both kinds, no exception


class Clock:
    t = 100.0

    def __call__(self) -> float:
        return self.t


class _Slot(ModelSlot):
    def _prepare(self, version, manifest_sha256):
        self._ready = (version, object(), None, {}, Path("/nonexistent") / str(version))


class LatestOnly:
    def __init__(self):
        self.value = None
        self.reads = 0
        self.fail = False

    def latest(self, kind):
        self.reads += 1
        if self.fail:
            raise urllib3.exceptions.MaxRetryError(None, "/", "S3 down")
        return self.value


def test_reader_reloads_from_latest_within_the_poll_interval_without_announcement() -> None:
    clock, store = Clock(), LatestOnly()
    slot = _Slot(store, "policy", Path("/nonexistent"), "r-poll", poll_s=5.0, clock=clock)
    assert slot.poll() is False and store.reads == 1  # nothing written yet
    store.value = {"version": 3, "manifest_sha256": "x"}  # LATEST moves, no announcement
    clock.t += 4.9
    assert not slot.poll_due() and slot.poll() is False and store.reads == 1
    clock.t += 0.1
    assert slot.poll() is True and slot.version == 3
    assert _count(M.DREAM_POLL_RELOADS, "r-poll", "policy") == 1
    clock.t += 5
    assert slot.poll() is False  # same version: nothing loaded
    store.fail = True
    clock.t += 5
    before = _count(M.CLIENT_ERRORS, "r-poll", "dream", "s3")
    assert slot.poll() is False and slot.version == 3  # S3 down: the loaded weights stay
    assert _count(M.CLIENT_ERRORS, "r-poll", "dream", "s3") == before + 1
    # an announcement-triggered refresh restarts the interval
    store.fail = False
    store.value = {"version": 4, "manifest_sha256": "y"}
    clock.t += 1
    assert slot.refresh() is True and not slot.poll_due()


def test_polling_off_never_reads() -> None:
    store = LatestOnly()
    slot = _Slot(store, "policy", Path("/nonexistent"), "r-off", poll_s=0.0, clock=Clock())
    assert slot.poll() is False and store.reads == 0


class _Pub:
    def __init__(self, healthy: bool, dead: bool = False):
        self.healthy, self.dead = healthy, dead
        self.errors, self.outstanding = 12, 34


def test_heartbeat_moves_only_while_publishes_succeed() -> None:
    run, cid = "r-beat", "c-beat"
    assert liveness_beat(_Pub(True), run, cid)
    beat = CM.HEARTBEAT.labels(run, cid)._value.get()
    assert beat > 0
    CM.HEARTBEAT.labels(run, cid).set(1.0)
    assert liveness_beat(_Pub(False), run, cid)  # failing: alive, but the heartbeat stays
    assert CM.HEARTBEAT.labels(run, cid)._value.get() == 1.0
    assert not liveness_beat(_Pub(False, dead=True), run, cid)  # dead: stop the collector
    assert CM.HEARTBEAT.labels(run, cid)._value.get() == 1.0
