"""Dead letters name where the original record was: topic, partition and offset."""

from __future__ import annotations

from collections import namedtuple

from core.config import load_config
from streams import records
from streams.kafka import DeadLetters
from streams.state import StreamState
from streams.topics import Topics

TP = namedtuple("TP", "topic partition")


class Out:
    def __init__(self):
        self.sent = []

    def send(self, topic, rec, key=None, headers=None):
        self.sent.append((topic, rec, dict(headers or [])))


def test_route_names_the_source_partition_and_offset() -> None:
    out = Out()
    dl = DeadLetters(out, "dlq", "stream-worker:w1")
    dl.route(b"junk", records.RecordError("malformed", "not json"), "real", 41, 3)
    topic, raw, h = out.sent[0]
    assert (topic, raw) == ("dlq", b"junk")
    assert h["source_topic"] == b"real"
    assert h["source_partition"] == b"3"
    assert h["source_offset"] == b"41"
    assert h["reason"] == b"malformed" and h["component"] == b"stream-worker:w1"
    dl.route(None, records.RecordError("malformed", "empty"), "real")  # location unknown: -1
    assert out.sent[1][2]["source_partition"] == b"-1" and out.sent[1][1] == b""


def test_the_stream_worker_dead_letters_with_the_partition() -> None:
    st = StreamState(load_config(env={"DYNAWEB_RUN_ID": "u"}), Topics("u"), clock=lambda: 0.0)
    out = Out()
    st.attach(out)
    assert not st.on_transition(st.topics.real, b"{not a record", 7, TP(st.topics.real, 2))
    dead = [s for s in out.sent if s[0] == st.topics.deadletter]
    assert len(dead) == 1
    h = dead[0][2]
    assert (h["source_topic"], h["source_partition"], h["source_offset"]) == (
        st.topics.real.encode(),
        b"2",
        b"7",
    )
    assert h["reason"]
