"""``models.checkpoints.reader.ReloadClock``: announcement seen -> first use, once per version."""

from __future__ import annotations

from models import metrics as M
from models.checkpoints.reader import ReloadClock


def _count(run: str, component: str) -> float:
    return M.RELOAD_TO_USE.labels(run, component)._sum.get()


def test_first_use_after_an_announcement_is_timed_once() -> None:
    now = [100.0]
    clock = ReloadClock("rc-unit", "dream", clock=lambda: now[0])
    clock.announced(3)
    now[0] = 101.5
    clock.announced(3)  # a repeated announcement keeps the first time
    assert clock.used(2) is None  # still acting with the old version: nothing
    now[0] = 102.0
    assert clock.used(3) == 2.0
    now[0] = 110.0
    assert clock.used(3) is None  # only the first use counts
    assert _count("rc-unit", "dream") == 2.0


def test_a_superseded_or_polled_version_is_not_timed() -> None:
    now = [0.0]
    clock = ReloadClock("rc-unit2", "collector", clock=lambda: now[0])
    clock.announced(4)
    clock.announced(5)
    now[0] = 3.0
    assert clock.used(5) == 3.0
    assert clock.seen == {}  # v4 was never used and is dropped
    assert clock.used(6) is None  # found by a LATEST poll, never announced
    assert clock.used(None) is None


def test_a_use_is_timed_at_the_moment_given() -> None:
    """The dream generator times a version at its round's first dreamed step, not when the
    round's records are sent: ``used(v, at=...)``."""
    now = [10.0]
    clock = ReloadClock("rc-unit3", "dream", clock=lambda: now[0])
    clock.announced(7)
    now[0] = 13.0  # the round ended and was sent at 13 s
    assert clock.used(7, at=11.25) == 1.25
    assert _count("rc-unit3", "dream") == 1.25
