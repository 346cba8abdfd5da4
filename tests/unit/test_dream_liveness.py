"""A learner that waits for dreamed groups makes progress within bounded time: with
``dream.drop_uniform_groups``, at most ``dream.max_dropped_per_published`` groups are dropped in a
row before one is published anyway (``models.dream.groups.keep_varied_capped``)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from core.config import Config
from models.dream.groups import keep_varied_capped

pytestmark = pytest.mark.unit


def _round(k: int, groups: int = 2, size: int = 4, varied: bool = False) -> list:
    """A round's rollouts: ``groups`` groups of ``size``; a varied group has one success."""
    return [
        SimpleNamespace(group_id=f"r{k}g{g}", reward=1.0 if varied and g == 0 and i == 0 else 0.0)
        for g in range(groups)
        for i in range(size)
    ]


def _published(rounds: list[list], cap: int) -> list[int]:
    """Groups published per round over a run of rounds."""
    out, streak = [], 0
    for ros in rounds:
        kept, _dropped, streak, _forced = keep_varied_capped(ros, streak, cap)
        out.append(len({ro.group_id for ro in kept}))
    return out


def test_only_uniform_groups_publish_one_every_cap_groups() -> None:
    rounds = [_round(k) for k in range(40)]  # the worst case: no group ever varies
    assert _published(rounds, cap=0) == [0] * 40  # no cap: the learner waits for ever
    pub = _published(rounds, cap=16)
    assert pub == ([0] * 7 + [1]) * 5  # 2 groups a round: one published every 16 dreamed
    dreamed_per_published = 2 * 40 / sum(pub)
    assert dreamed_per_published == 16


def test_a_published_varied_group_starts_the_count_again() -> None:
    streak = 0
    for k in range(5):
        _kept, dropped, streak, forced = keep_varied_capped(_round(k), streak, 16)
        assert dropped == 2 and not forced
    assert streak == 10
    kept, dropped, streak, forced = keep_varied_capped(_round(5, varied=True), streak, 16)
    assert {ro.group_id for ro in kept} == {"r5g0"} and dropped == 1 and streak == 0
    assert not forced


def test_the_forced_group_is_whole_and_counted_apart() -> None:
    kept, dropped, streak, forced = keep_varied_capped(_round(0, groups=3), 15, 16)
    assert forced and streak == 0 and dropped == 2
    assert len(kept) == 4 and {ro.group_id for ro in kept} == {"r0g0"}


def test_the_default_caps_the_wait() -> None:
    assert Config().dream.max_dropped_per_published == 16
