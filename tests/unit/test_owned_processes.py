"""CI stops only the processes its tests started (``tests/owned.py``): found by the run's tag in
their environment, whatever session they started, stopped by pid; a process matching the
services' names without the tag is named and left running."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from core.waiting import wait_until
from tests import owned

pytestmark = pytest.mark.unit


def _sleeper(tag: str | None, marker: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != owned.TAG}
    if tag:
        env[owned.TAG] = tag
    # a process of its own session, as the stack's services start
    return subprocess.Popen(
        [sys.executable, "-c", "import time, sys; time.sleep(120)", marker],
        env=env,
        start_new_session=True,
    )


def test_only_the_tagged_processes_are_stopped_and_the_others_named(capsys) -> None:
    tag = f"unit-{os.getpid()}-{time.time_ns()}"
    marker = f"owned-test-{tag}"
    mine, theirs = _sleeper(tag, marker), _sleeper(None, marker)
    other_run = _sleeper(tag + "-other", marker)
    try:
        wait_until(lambda: owned.owned(tag) == [mine.pid], 10, "the tagged sleeper started")
        rc = owned.main(["--tag", tag, "--pattern", marker, "--grace", "5"])
        assert rc == 1  # it had to stop one
        assert mine.wait(5) is not None
        assert theirs.poll() is None and other_run.poll() is None  # left running
        out = capsys.readouterr().out
        assert f"stopped pid {mine.pid}" in out
        assert f"left alone pid {theirs.pid}" in out and f"left alone pid {other_run.pid}" in out
        assert owned.main(["--tag", tag, "--pattern", marker]) == 0  # nothing of ours left
    finally:
        for p in (mine, theirs, other_run):
            p.kill()
            p.wait()


def test_the_shell_that_carries_the_tag_is_not_its_own_victim() -> None:
    assert os.getpid() in owned.ancestors(os.getpid())
    assert os.getppid() in owned.ancestors(os.getpid())
