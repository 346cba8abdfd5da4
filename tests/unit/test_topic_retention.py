"""Topic retention (time and size) is applied at creation from the typed config.

The embedded broker cannot report topic configs back (``describe_configs`` returns nothing,
docs/broker.md defect 6), so this checks the CreateTopics requests ensure_topics sends, with a
stand-in admin client (unit test only); the real broker path is exercised by every
integration test that creates topics."""

from __future__ import annotations

import pytest

import streams.kafka as sk
from core.config import Config
from streams.topics import Topics


class _Admin:
    created: list = []

    def __init__(self, **kw):
        self.kw = kw

    def list_topics(self):
        return ["dynaweb.r1.real"]  # one exists already: not created again

    def create_topics(self, topics):
        _Admin.created.extend(topics)

    def close(self):
        pass


@pytest.fixture
def admin(monkeypatch):
    _Admin.created = []
    monkeypatch.setattr(sk, "KafkaAdminClient", _Admin)
    monkeypatch.setattr(sk, "check_broker", lambda kc: None)
    return _Admin


def test_retention_time_and_size_reach_every_created_topic(admin):
    cfg = Config()
    cfg.run_id = "r1"
    cfg.kafka.retention_ms = 3_600_000
    cfg.kafka.retention_bytes = 10_000_000
    topics = sk.ensure_topics(cfg)
    names = {t.name for t in admin.created}
    assert names == set(Topics("r1", cfg.kafka.partitions).all().values()) - {"dynaweb.r1.real"}
    for t in admin.created:
        assert t.topic_configs == {"retention.ms": "3600000", "retention.bytes": "10000000"}
        assert t.replication_factor == cfg.kafka.replication_factor
    assert topics.run_id == "r1"


def test_retention_from_the_environment(admin):
    from core.config import load_config

    cfg = load_config(env={"DYNAWEB_KAFKA__RETENTION_MS": "60000", "DYNAWEB_RUN_ID": "r1"})
    sk.ensure_topics(cfg)
    assert admin.created and all(t.topic_configs["retention.ms"] == "60000" for t in admin.created)
    assert all(
        t.topic_configs["retention.bytes"] == "-1" for t in admin.created
    )  # default: unlimited size


class _Consumer:
    def __init__(self, parts: dict, ready_after: int = 0):
        self.parts, self.calls, self.ready_after = parts, 0, ready_after

    def partitions_for_topic(self, t):
        self.calls += 1
        return self.parts.get(t) if self.calls > self.ready_after else None


def test_assignable_waits_for_metadata_then_lists_every_partition():
    c = _Consumer({"a": {1, 0}, "b": {0}}, ready_after=1)
    tps = sk.assignable(c, ["a", "b"], timeout=5)
    assert [(tp.topic, tp.partition) for tp in tps] == [("a", 0), ("a", 1), ("b", 0)]


def test_assignable_names_a_missing_topic():
    with pytest.raises(TimeoutError, match="topic missing has no partitions"):
        sk.assignable(_Consumer({}), ["missing"], timeout=0.3)
