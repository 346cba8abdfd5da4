"""One polling helper for "wait until this is true" (benchmarks, tests), and ``Aborted``: a long
computation that was told to stop (its ``abort`` callable said so) before it finished."""

from __future__ import annotations

import time
from collections.abc import Callable


class Aborted(Exception):
    """A computation gave up because its ``abort`` callable said so (nothing is returned)."""


def wait_until(
    cond: Callable[[], object],
    timeout: float,
    what: str,
    every: float = 0.05,
    error: type[Exception] = TimeoutError,
) -> object:
    """Call ``cond`` every ``every`` seconds until it returns something truthy (returned); raise
    ``error`` naming ``what`` after ``timeout`` seconds.  ``cond`` runs at least once."""
    deadline = time.time() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.time() > deadline:
            raise error(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(every)
