"""Hot reload in the dream generator: a round is given up when a checkpoint is announced mid-round
(never two rounds in a row), and back-pressure pacing never holds a reload back."""

from __future__ import annotations

import dataclasses
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from core.config import ModelConfig
from core.waiting import Aborted
from evaluation.bench.runners import FixedLengthRunner
from models import metrics as M
from models.dream.dreamer import StartState
from models.dream.env import dream_rollouts
from models.lm.saved import make_model
from models.world_model.decoding import ABORT_EVERY
from models.world_model.model import WorldModel
from models.world_model.runner import WorldModelRunner
from tests.factories import DREAM_PAGE as PAGE
from tests.factories import FixedPolicy, SamePage, dreamer


def test_rollouts_are_given_up_when_abort_says_so_after_the_first_step():
    pol = FixedPolicy()
    full = dream_rollouts(pol, SamePage(), [PAGE], group_size=2, horizon=4, abort=lambda: False)
    assert len(full) == 2 and all(len(r) == 4 for r in full)
    asked = []

    def abort():
        asked.append(pol.calls)
        return len(asked) >= 2  # a checkpoint arrives during the second step

    pol.calls = 0
    assert dream_rollouts(pol, SamePage(), [PAGE], group_size=2, horizon=4, abort=abort) == []
    assert asked == [1, 2] and pol.calls == 2  # asked before steps 2 and 3; step 3 never ran


LIVE_PAGE = dataclasses.replace(PAGE, element_ids=[1, 2])  # clicks on it need the world model


def _tiny_world_model() -> WorldModelRunner:
    torch.manual_seed(0)
    model, tok = make_model(
        WorldModel, ModelConfig(layers=1, d_model=32, heads=2, max_positions=512)
    )
    # every call writes its whole budget, as fresh weights do
    return FixedLengthRunner(model.eval(), tok, max_change_tokens=64)


def test_the_world_model_call_in_flight_stops_when_abort_says_so():
    wr = _tiny_world_model()
    prompts = [wr.prompt_ids(LIVE_PAGE, "click(2)")]
    with torch.no_grad():
        full = wr.generate_texts(prompts, abort=lambda: False)  # never told: the same text
    assert full == wr.generate_texts(prompts)
    asked = []

    def abort():
        asked.append(len(asked))
        return len(asked) >= 3

    with pytest.raises(Aborted):
        wr.generate_texts(prompts, abort=abort)
    # asked every ABORT_EVERY tokens and stopped at the third: 24 of the 64 tokens were written
    assert len(asked) == 3 and 3 * ABORT_EVERY < wr.max_change_tokens


def test_a_round_is_given_up_inside_the_world_model_call_when_a_checkpoint_is_announced():
    wr = _tiny_world_model()
    calls = []
    orig = wr.predict

    def counted(*a, **k):
        calls.append(k.get("abort"))
        return orig(*a, **k)

    wr.predict = counted
    told = threading.Event()
    ros = dream_rollouts(FixedPolicy(), wr, [LIVE_PAGE], group_size=2, horizon=3, abort=told.is_set)
    assert len(ros) == 2 and all(len(r) == 3 for r in ros) and calls[0] is not None
    told.set()  # announced before the round: its first step's world-model call stops at once
    calls.clear()
    assert (
        dream_rollouts(FixedPolicy(), wr, [LIVE_PAGE], group_size=2, horizon=3, abort=told.is_set)
        == []
    )
    assert len(calls) == 1  # the first step's call was given up; no later step ran


def test_a_round_is_abandoned_for_an_announcement_but_never_two_in_a_row():
    d = dreamer()
    given_up = M.DREAM_ABANDONED.labels(d.run)
    before = given_up._value.get()
    assert d.dream_once() > 0 and not d.abandoned_last  # nothing announced: the round completes
    d._announced.set()  # announced (and not yet taken by poll) during the next round
    assert d.dream_once() == 0 and d.abandoned_last
    assert given_up._value.get() == before + 1
    n = len(d.sent)
    assert d.dream_once() > 0 and not d.abandoned_last  # the round after an abandoned one completes
    assert len(d.sent) > n and given_up._value.get() == before + 1


def test_pacing_ends_at_an_announcement():
    d = dreamer()
    t0 = time.time()
    threading.Timer(0.2, d._announced.set).start()
    d._pace(time.time() + 30)
    assert time.time() - t0 < 5
    d._announced.clear()
    t0 = time.time()
    d._pace(time.time() + 0.3)  # no announcement: the whole wait
    assert time.time() - t0 >= 0.29


def test_back_pressure_stretches_the_whole_iteration_not_only_the_round():
    d = dreamer()
    waits = []
    d._pace = lambda until: waits.append(until - time.time())
    d.set_rate_factor(0.25, lag=32)
    assert d.rate_factor == 0.25 and M.DREAM_RATE_FACTOR.labels(d.run)._value.get() == 0.25
    # the iteration began 0.3 s before the round (its poll, say): the wait makes the whole
    # iteration last 4x, so the steps/s fall to the factor however long the round itself took
    d.iteration_t0 = time.time() - 0.3
    assert d.dream_once() > 0
    assert len(waits) == 1 and 0.85 <= waits[0] <= 1.2  # 0.3 s of work -> 1.2 s, 0.9 s waited
    d.set_rate_factor(5.0)  # clamped to full speed: no wait
    waits.clear()
    d.iteration_t0 = time.time() - 0.3
    d.dream_once()
    assert d.rate_factor == 1.0 and waits == []


def test_the_first_round_with_new_weights_dreams_one_group():
    d = dreamer()
    d.starts.append(StartState(PAGE, "miniwob/click-test", 2))
    G, full = d.dream.group_size, d.dream.batch // d.dream.group_size
    assert full >= 2
    d.first_round = True  # as refresh_models leaves it after loading a new version
    n1 = d.dream_once()
    groups = {r.group_id for r in d.sent}
    assert len(groups) == 1 and not d.first_round
    d.sent.clear()
    d.dream_once()
    assert len({r.group_id for r in d.sent}) == full and n1 > 0 and G > 1


class _SlowPolicy(FixedPolicy):
    def act_info(self, obs_b, hist, temperature=1.0, greedy=False):
        time.sleep(0.02)
        return super().act_info(obs_b, hist, temperature, greedy)


def test_a_dreamed_transition_is_stamped_when_its_step_was_dreamed():
    """``created_at`` of a dream record is when its step was dreamed, not when the round's records
    were sent; the reload clock times the version at the round's first step (as a collector's
    is timed at its first action)."""
    d = dreamer()
    d.runners = lambda: (_SlowPolicy(), SamePage())
    timed = []
    d.reload_clock = SimpleNamespace(used=lambda v, at=None: timed.append((v, at)))
    t0 = time.time()
    assert d.dream_once() > 0
    sent_at = time.time()
    by_step: dict[int, set[float]] = {}
    for r in d.sent:
        by_step.setdefault(r.step, set()).add(r.created_at)
    assert len(by_step) == d.dream.horizon >= 2
    firsts = [min(by_step[h]) for h in sorted(by_step)]
    assert t0 < firsts[0] and all(
        b - a >= 0.015 for a, b in zip(firsts[:-1], firsts[1:], strict=True)
    )
    assert firsts[-1] <= sent_at
    assert timed == [(3, firsts[0])]


def _transition(step: int) -> bytes:
    from streams import records

    rec = records.Transition(
        run_id="abandon", episode_id="e1", step=step, task="miniwob/click-test", seed=4,
        source="expert", policy_version=0, world_model_version=0, obs=PAGE.to_dict(),
        action="click(1)", next_obs=PAGE.to_dict(), reward=0.0, done=False,
    )  # fmt: skip
    return records.encode(rec)


def test_dreams_start_from_any_real_step_or_only_the_first():
    for start_from, expected in (("any", [0, 2]), ("first", [0])):
        d = dreamer()
        d.dream.start_from = start_from
        d.starts.clear()
        msgs = [SimpleNamespace(value=_transition(s)) for s in (0, 2)]
        d.consumer = SimpleNamespace(poll=lambda timeout_ms, msgs=msgs: {"tp": msgs})
        d.slots = {k: SimpleNamespace(poll_due=lambda: False) for k in ("policy", "world_model")}
        d.poll(0)
        assert len(d.starts) == len(expected), start_from
        assert all(s.task == "miniwob/click-test" and s.seed == 4 for s in d.starts)


def test_an_announcement_of_a_version_loaded_or_loading_does_not_give_a_round_up():
    """The trainer announces the policy and the world model once both are LATEST: the first
    announcement loads the pair, the second (already loaded, or being loaded) must not abandon
    the round that follows.  A newer version, or an older one (a rollback), still does."""
    from models.checkpoints.reader import ModelSlot, Prefetcher
    from streams import records

    d = dreamer()
    d.reload_clock = SimpleNamespace(announced=lambda v: None)
    d.slots = {
        k: ModelSlot(None, k, Path("/nonexistent"), "abandon") for k in ("policy", "world_model")
    }
    for s in d.slots.values():
        s.version = 4
    d.slots["world_model"].loading = 5
    d.prefetcher = Prefetcher(list(d.slots.values()), d._announced.set, threading.Event())

    def ann(kind: str, v: int) -> records.CheckpointAnnouncement:
        return records.CheckpointAnnouncement(
            run_id="abandon", kind=kind, version=v, uri="s3://b/x", manifest_sha256="0" * 64
        )

    for kind, v, wakes in (
        ("policy", 4, False),  # loaded
        ("world_model", 5, False),  # being loaded now
        ("world_model", 4, False),
        ("policy", 5, True),  # new
        ("policy", 2, True),  # a rollback
    ):
        d.prefetcher._wanted.clear()
        d._on_announcement(ann(kind, v))
        assert d.prefetcher.wanted == wakes, (kind, v)


def test_a_new_policys_first_round_holds_the_world_models_load_back(monkeypatch):
    import models.dream.dreamer as dreamer_mod

    d = dreamer()
    d.reload_clock = SimpleNamespace(used=lambda v, at=None: None, announced=lambda v: None)
    d.slots = {"policy": SimpleNamespace(version=3, known=lambda v: v == 3),
               "world_model": SimpleNamespace(version=3, known=lambda v: v == 3)}  # fmt: skip
    d.prefetcher = SimpleNamespace(want=lambda: None)
    d._round_done.set()
    d._hold_world_model_load()  # nothing announced: no wait
    d._on_announcement(SimpleNamespace(kind="policy", version=3))  # the one in use
    assert d._round_done.is_set()
    # v4 already being loaded (the world model's announcement came first): still held back
    d.slots["policy"].known = lambda v: v in (3, 4)
    d._on_announcement(SimpleNamespace(kind="policy", version=4))
    assert not d._round_done.is_set()
    monkeypatch.setattr(dreamer_mod, "HOLD_WM_LOAD_S", 0.3)
    t0 = time.time()
    d._hold_world_model_load()  # no round with v4 yet: waits, but never past the bound
    assert 0.25 <= time.time() - t0 < 2.0
    d.dream_once()  # a round with v3 (the old policy) does not release it
    assert not d._round_done.is_set()
    d.slots["policy"].version = 4
    d.first_round = True
    d.dream_once()  # the first round with v4: the world model may load
    assert d._round_done.is_set()
    t0 = time.time()
    d._hold_world_model_load()
    assert time.time() - t0 < 0.1
