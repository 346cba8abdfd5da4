"""The msgspec schema of streams.records: every dead-letter reason on both decoding paths (the
fast typed decoder, used when the caller names the type, and the lenient one), compatibility
with records written by the previous encoder (``json.dumps(dataclasses.asdict(rec))``)."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from streams import records
from streams.records import RecordError, Transition, decode, encode


def make(**kw) -> Transition:
    obs = {"instruction": "Cliquez « OK »", "url": "u", "tree": '[1] button "OK"'}
    base = dict(
        run_id="r",
        episode_id="e",
        step=2,
        task="miniwob/click-button",
        seed=1,
        source="real",
        policy_version=3,
        world_model_version=1,
        obs=obs,
        action="click(1)",
        next_obs=obs,
        reward=1.0,
        done=True,
        created_at=1764648000.123456,
        group_id="g",
        behaviour_logprob=-0.25,
        info={"x": [1, 2]},
    )
    base.update(kw)
    return Transition(**base)


def old_encode(rec) -> bytes:
    """The encoder before msgspec (what existing records on a topic were written with)."""
    return json.dumps(dataclasses.asdict(rec), ensure_ascii=False, separators=(",", ":")).encode()


def without(key):
    return lambda d: {k: v for k, v in d.items() if k != key}


CASES = [
    (lambda d: b"{not json", "not_json"),
    (lambda d: b'{"type":"transition","run_id":"\xff"}', "not_json"),
    (lambda d: [1, 2], "wrong_type"),
    (lambda d: "a string", "wrong_type"),
    (without("type"), "unknown_type"),
    (lambda d: {**d, "type": "bogus"}, "unknown_type"),
    (lambda d: {**d, "type": "control"}, "unexpected_type"),
    (without("schema"), "schema_version"),
    (lambda d: {**d, "schema": 99}, "schema_version"),
    (without("episode_id"), "missing_field"),
    (lambda d: {**d, "episode_id": None}, "missing_field"),
    (without("world_model_version"), "missing_field"),  # required since schema 2
    (lambda d: {**d, "step": "3"}, "wrong_type"),
    (lambda d: {**d, "step": 1.5}, "wrong_type"),
    (lambda d: {**d, "seed": True}, "wrong_type"),
    (lambda d: {**d, "reward": True}, "wrong_type"),
    (lambda d: {**d, "done": 1}, "wrong_type"),
    (lambda d: {**d, "truncated": "yes"}, "wrong_type"),
    (lambda d: {**d, "group_id": 5}, "wrong_type"),
    (lambda d: {**d, "behaviour_logprob": "low"}, "wrong_type"),
    (lambda d: {**d, "obs": "a page"}, "wrong_type"),
    (lambda d: {**d, "obs": {"instruction": "x"}}, "wrong_type"),
    (lambda d: {**d, "next_obs": {"instruction": 1, "tree": "t"}}, "wrong_type"),
    (lambda d: {**d, "source": "imagined"}, "bad_value"),
    (lambda d: {**d, "step": -1}, "bad_value"),
]


@pytest.mark.parametrize("expect", [None, "transition"])
@pytest.mark.parametrize("mutate, reason", CASES)
def test_every_reason_on_both_paths(mutate, reason: str, expect: str | None) -> None:
    d = json.loads(encode(make()))
    bad = mutate(d)
    raw = bad if isinstance(bad, bytes) else json.dumps(bad).encode()
    if reason == "unexpected_type" and expect is None:
        reason = "missing_field"  # read as what it says it is: a control record without "kind"
    with pytest.raises(RecordError) as ei:
        decode(raw, expect=expect)
    assert ei.value.reason == reason, ei.value


def test_empty_and_oversize() -> None:
    for expect in (None, "transition"):
        with pytest.raises(RecordError) as ei:
            decode(None, expect=expect)
        assert ei.value.reason == "empty"
        with pytest.raises(RecordError) as ei:
            decode(encode(make()), expect=expect, max_bytes=100)
        assert ei.value.reason == "oversize"


def test_records_of_the_previous_encoder_decode_the_same() -> None:
    t = make()
    assert encode(t) == old_encode(t)  # byte for byte: same field order, separators, UTF-8
    for expect in (None, "transition"):
        back = decode(old_encode(t), expect=expect)
        assert type(back) is Transition and back == t
    assert decode(encode(t).decode(), expect="transition") == t  # str input too


def test_what_the_lenient_path_accepts() -> None:
    d = json.loads(encode(make()))
    # nulls where today's schema allows them, unknown fields, an int where a float is expected
    d.update(truncated=None, group_id=None, created_at=None, extra={"a": 1}, reward=1)
    t = decode(json.dumps(d).encode(), expect="transition")
    assert t.group_id is None and t.truncated is None and t.reward == 1.0
    assert not hasattr(t, "extra")
    # NaN / Infinity: not JSON, but json.dumps wrote them and existing records may hold them
    raw = old_encode(make(behaviour_logprob=float("-inf"), reward=float("nan")))
    assert b"-Infinity" in raw
    t = decode(raw, expect="transition")
    assert t.behaviour_logprob == float("-inf") and t.reward != t.reward


def test_previous_schema_without_the_world_model_version() -> None:
    d = json.loads(encode(make()))
    d["schema"] = 1
    del d["world_model_version"]
    for expect in (None, "transition"):
        t = decode(json.dumps(d).encode(), expect=expect)
        assert t.world_model_version == 0 and t.schema == records.SCHEMA


def test_the_other_record_types() -> None:
    traj = records.Trajectory.from_transitions([make(step=0)])
    for expect in (None, "trajectory"):
        assert decode(encode(traj), expect=expect) == traj
    d = json.loads(encode(traj))
    del d["world_model_version"]  # a trajectory without it reads as 0
    assert decode(json.dumps(d).encode(), expect="trajectory").world_model_version == 0
    bad = [
        ({**d, "transitions": []}, "bad_value"),
        ({**d, "seed": "1"}, "wrong_type"),
    ]
    batch = records.TrainingBatch("r", "b", "w", "mixed", [dataclasses.asdict(traj)], 0.5)
    assert decode(encode(batch), expect="training_batch").trajs() == [traj]
    b = json.loads(encode(batch))
    bad += [({**b, "kind": "most"}, "bad_value"), (without("worker_id")(b), "missing_field")]
    ck = json.loads(encode(records.CheckpointAnnouncement("r", "policy", 3, "s3://x", "ab")))
    bad += [({**ck, "version": "3"}, "wrong_type")]
    ctl = json.loads(encode(records.Control("r", "sentinel", "me")))
    bad += [(without("sender")(ctl), "missing_field")]
    for rec, reason in bad:
        for expect in (None, rec["type"]):
            with pytest.raises(RecordError) as ei:
                decode(json.dumps(rec).encode(), expect=expect)
            assert ei.value.reason == reason, (rec["type"], ei.value)


def test_encode_numpy_scalars_and_non_finite_floats() -> None:
    t = make(reward=np.float64(0.5), seed=np.int64(7), info={"v": np.float32(0.25)})
    d = json.loads(encode(t))
    assert d["reward"] == 0.5 and d["seed"] == 7 and d["info"] == {"v": 0.25}
    # JSON has no NaN: msgspec writes null (an optional field then reads as None)
    assert json.loads(encode(make(behaviour_logprob=float("nan"))))["behaviour_logprob"] is None
    with pytest.raises(TypeError):
        encode(make(info={"v": object()}))
