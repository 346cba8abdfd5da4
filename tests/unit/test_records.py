"""Record schemas: round trip, validation reasons, previous-version compatibility."""

from __future__ import annotations

import json

import pytest

from streams import records
from streams.records import RecordError, Transition, decode, encode


def make(**kw) -> Transition:
    obs = {"instruction": "Click OK", "url": "u", "tree": '[1] button "OK"'}
    base = dict(
        run_id="r",
        episode_id="e",
        step=0,
        task="miniwob/click-button",
        seed=1,
        source="expert",
        policy_version=0,
        world_model_version=0,
        obs=obs,
        action="click(1)",
        next_obs=obs,
        reward=1.0,
        done=True,
    )
    base.update(kw)
    return Transition(**base)


def test_roundtrip_keeps_every_field() -> None:
    t = make(behaviour_logprob=-1.5, group_id="g", info={"x": [1, 2]})
    back = decode(encode(t), expect="transition")
    assert back == t
    assert back.key == ("e", 0) and back.final


@pytest.mark.parametrize(
    "mutate, reason",
    [
        (lambda d: b"{not json", "not_json"),
        (lambda d: {**d, "schema": 99}, "schema_version"),
        (lambda d: {k: v for k, v in d.items() if k != "episode_id"}, "missing_field"),
        (lambda d: {**d, "step": "3"}, "wrong_type"),
        (lambda d: {**d, "reward": True}, "wrong_type"),
        (lambda d: {**d, "source": "imagined"}, "bad_value"),
        (lambda d: {**d, "type": "bogus"}, "unknown_type"),
        (lambda d: {**d, "obs": {"instruction": "x"}}, "wrong_type"),
        (lambda d: {**d, "next_obs": None}, "missing_field"),
        (lambda d: {k: v for k, v in d.items() if k != "next_obs"}, "missing_field"),
        (lambda d: [1, 2], "wrong_type"),
    ],
)
def test_invalid_messages_give_a_reason(mutate, reason: str) -> None:
    d = json.loads(encode(make()))
    bad = mutate(d)
    raw = bad if isinstance(bad, bytes) else json.dumps(bad).encode()
    with pytest.raises(RecordError) as ei:
        decode(raw)
    assert ei.value.reason == reason


def test_oversize_is_rejected_before_parsing() -> None:
    with pytest.raises(RecordError) as ei:
        decode(b"x" * 101, max_bytes=100)
    assert ei.value.reason == "oversize"


def test_previous_schema_version_is_accepted_and_upgraded() -> None:
    d = json.loads(encode(make()))
    d["schema"] = 1
    del d["world_model_version"], d["group_id"], d["behaviour_logprob"]
    t = decode(json.dumps(d).encode())
    assert t.schema == records.SCHEMA and t.world_model_version == 0 and t.group_id == ""


def test_trajectory_from_transitions_orders_and_marks_truncation() -> None:
    ts = [make(step=1, done=False, reward=0.0), make(step=0, done=False, reward=0.0)]
    tr = records.Trajectory.from_transitions(ts)
    assert [s.step for s in tr.steps()] == [0, 1] and tr.truncated
    done = records.Trajectory.from_transitions(
        [make(step=0, done=False, reward=0), make(step=1, reward=1.0)]
    )
    assert not done.truncated and done.reward == 1.0
    assert decode(encode(done), expect="trajectory") == done


def test_policy_steps_carry_no_next_obs_and_still_validate() -> None:
    ts = [make(step=0, done=False, reward=0.0), make(step=1, reward=1.0)]
    for deep in (True, False):
        tr = records.Trajectory.from_transitions(ts, deep=deep, next_obs=False)
        assert all(s["next_obs"] is None for s in tr.transitions)
        steps = tr.steps()  # what the learner validates
        assert [s.step for s in steps] == [0, 1] and steps[0].obs == ts[0].obs
        assert all(s.next_obs is None for s in steps)
        assert ts[0].next_obs is not None  # the transitions themselves are left as they were
        back = decode(encode(tr), expect="trajectory")
        assert back.steps()[1].action == ts[1].action
    full = records.Trajectory.from_transitions(ts)
    saved = sum(len(encode(t.next_obs)) - len(b"null") for t in ts)
    assert (
        saved > 0 and abs(len(encode(full)) - len(encode(tr)) - saved) <= 4
    )  # created_at's digits
    # a step without a page is still refused
    bad = dict(tr.transitions[0], obs={"instruction": "x"})
    with pytest.raises(RecordError) as ei:
        records.Transition.validate_step(bad)
    assert ei.value.reason == "wrong_type"
