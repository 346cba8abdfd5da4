"""StreamState without Kafka: held messages, commit points, reset after a
rebalance, per-worker / per-run lag."""

from __future__ import annotations

from core.config import load_config
from streams import records
from streams.records import Control, Transition
from streams.state import StreamState
from streams.topics import Topics


class Out:
    def __init__(self):
        self.sent = []

    def send(self, topic, rec, key=None, headers=None):
        self.sent.append((topic, rec))


def make(overrides: dict | None = None, **stream) -> StreamState:
    env = {
        "DYNAWEB_RUN_ID": "u",
        "DYNAWEB_STREAM__WORKER_ID": "w1",
        "DYNAWEB_STREAM__GROUP_SIZE": "2",
        "DYNAWEB_STREAM__BATCH_TRAJECTORIES": "4",
        "DYNAWEB_STREAM__SAMPLES_PER_INSERT": "0",
    }
    env.update({f"DYNAWEB_STREAM__{k.upper()}": str(v) for k, v in stream.items()})
    st = StreamState(load_config(env=env, overrides=overrides), Topics("u"), clock=lambda: 0.0)
    st.attach(Out())
    return st


def t(ep: str, step: int, source: str, done: bool, group: str = "") -> bytes:
    obs = {"instruction": "i", "tree": f"p{step}"}
    return records.encode(
        Transition(
            run_id="u",
            episode_id=ep,
            step=step,
            task="x",
            seed=1,
            source=source,
            policy_version=0,
            world_model_version=0,
            obs=obs,
            action="click(1)",
            next_obs=obs,
            reward=0.0,
            done=done,
            group_id=group,
        )
    )


def test_commit_point_waits_for_the_oldest_episode_in_progress():
    st = make()
    tp = ("dream", 0)
    for e in ("e1", "e2"):  # the expert pool: 2 experts
        for s in range(2):
            st.on_side(st.topics.expert, t(e, s, "expert", s == 1))
    assert len(st.mixer.pool) == 2
    assert st.on_transition(st.topics.dream, t("a", 0, "dream", False, "g"), 0, tp)
    assert st.on_transition(st.topics.dream, t("b", 0, "dream", False, "g2"), 1, tp)
    assert st.on_transition(st.topics.dream, t("a", 1, "dream", True, "g"), 2, tp)
    st.settle()
    assert st.commit_points() == {tp: 0}  # "a" sits in an open group
    assert st.on_transition(
        st.topics.dream, t("c", 0, "dream", True, "g"), 3, tp
    )  # group g complete
    assert st.emit() == 1
    st.settle()
    assert st.commit_points() == {tp: 1}  # "b" is still open
    assert not st.on_transition(
        st.topics.dream, t("a", 1, "dream", True, "g"), 4, tp
    )  # a duplicate
    assert st.commit_points() == {tp: 1}


def test_reset_skips_emitted_episodes_and_forgets_open_ones():
    st = make()
    tp = ("dream", 1)
    st.on_transition(st.topics.dream, t("a", 0, "dream", False, "g"), 5, tp)
    st.reset({"x"})
    assert not st.held and not st.episodes.open and not st.positions
    assert not st.on_transition(
        st.topics.dream, t("x", 0, "dream", False, "g"), 6, tp
    )  # already emitted
    assert st.on_transition(st.topics.dream, t("a", 0, "dream", False, "g"), 5, tp)  # re-read, kept


def test_lag_per_worker_and_per_run():
    st = make(lag_bound=2)
    st.produced = 5
    st.on_control(records.encode(Control("u", "produced", "w2", 7.0)))
    st.on_control(records.encode(Control("u", "consumed", "trainer", 6.0)))
    assert st.lag == 5 + 7 - 6  # no by_worker: the run's lag
    st.on_control(
        records.encode(Control("u", "consumed", "trainer", 6.0, info={"by_worker": {"w1": 4}}))
    )
    assert st.lag == 1  # this worker's own
    st.on_control(records.encode(Control("u", "produced", "w1", 3.0, info={"incarnation": "old"})))
    assert st.lag == 3 + 5 - 4  # continues an earlier incarnation's count
    st.backpressure(0.0)
    bp = [r for _t, r in st.out.sent if isinstance(r, Control) and r.kind == "backpressure"]
    assert bp and bp[-1].value == round(2 / 4, 3)


def test_expert_only_batches_only_while_few_wait_for_a_trainer():
    st = make(expert_only_max_lag=4)
    st.produced = 10  # no trainer has reported yet (it may be starting): the start-up allowance
    assert st.expert_only_allowed()
    st.produced = 64
    assert not st.expert_only_allowed()
    st.on_control(
        records.encode(Control("u", "consumed", "trainer", 60.0, info={"by_worker": {"w1": 60}}))
    )
    assert st.lag == 4 and not st.expert_only_allowed()  # 4 wait: enough to keep the trainer busy
    st.on_control(
        records.encode(Control("u", "consumed", "trainer", 61.0, info={"by_worker": {"w1": 61}}))
    )
    assert st.lag == 3 and st.expert_only_allowed()
    assert not make(expert_only_batches=False).expert_only_allowed()


def test_a_source_left_out_of_policy_sources_feeds_the_world_model_only():
    """``stream.policy_sources=['dream']`` (the dynaweb_dream_only arm): a real group is forwarded
    to the world-model topics, counted as not trained, never batched, and its messages are
    released for commit; dream groups are batched as before."""
    st = make({"stream.policy_sources": ["dream"]})
    out = st.out
    for e in ("e1", "e2"):
        for s in range(2):
            st.on_side(st.topics.expert, t(e, s, "expert", s == 1))
    tp = ("real", 0)
    for i, ep in enumerate(("r1", "r2")):
        st.on_transition(st.topics.real, t(ep, 0, "real", True, "gr"), i, tp)
    wm_topics = (st.topics.world_model, st.topics.world_model_eval)
    assert len(out.sent) == 2 and all(topic in wm_topics for topic, _ in out.sent)
    assert st.mixer.drops["source_not_trained"] == 2 and st.emit() == 0
    st.settle()
    assert st.commit_points() == {tp: 2}  # nothing held
    dp = ("dream", 0)
    for i, ep in enumerate(("d1", "d2")):
        st.on_transition(st.topics.dream, t(ep, 0, "dream", True, "gd"), i, dp)
    assert st.emit() == 1
    batch = records.decode(out.sent[-1][1])
    assert {tr["source"] for tr in batch.trajectories} == {"dream", "expert"}


def test_policy_sources_must_name_real_or_dream():
    import pytest

    with pytest.raises(ValueError, match="stream.policy_sources"):
        StreamState(
            load_config(env={"DYNAWEB_RUN_ID": "u"}, overrides={"stream.policy_sources": ["live"]}),
            Topics("u"),
        )


def test_policy_batches_carry_no_next_obs_and_the_world_model_topics_get_it_whole():
    st = make()
    tp = ("real", 0)
    for e in ("e1", "e2"):
        for s in range(2):
            st.on_side(st.topics.expert, t(e, s, "expert", s == 1))
    for i, ep in enumerate(("a", "b")):
        st.on_transition(st.topics.real, t(ep, 0, "real", False, "g"), 2 * i, tp)
        st.on_transition(st.topics.real, t(ep, 1, "real", True, "g"), 2 * i + 1, tp)
    assert st.emit() == 1
    sent = st.out.sent
    batches = [records.decode(r, expect="training_batch") for topic, r in sent
               if topic == st.topics.policy_batches]  # fmt: skip
    assert len(batches) == 1
    trajs = batches[0].trajs()
    assert {tr.source for tr in trajs} == {"real", "expert"}
    for tr in trajs:
        assert all(s.next_obs is None and s.obs["tree"] for s in tr.steps())
    fwd = [records.decode(r, expect="transition") for topic, r in sent
           if topic in (st.topics.world_model, st.topics.world_model_eval)]  # fmt: skip
    assert len(fwd) == 4 and all(f.next_obs == {"instruction": "i", "tree": f"p{f.step}"}
                                 for f in fwd)  # fmt: skip
