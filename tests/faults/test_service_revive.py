"""A service of the stack whose process died is started again by ``Stack.revive`` (what ``dynaweb
up`` does for the web application it runs, ``infra.up.AppKeeper``): the session's task server is
killed (-9) and revived on its port; a running one is left as it is."""

from __future__ import annotations

import pytest

from core.config import Config
from core.net import http_status
from infra.stack import Stack

pytestmark = [pytest.mark.faults, pytest.mark.timeout(120)]


def test_a_dead_service_is_started_again_and_a_live_one_left_alone(run_cfg: Config) -> None:
    stack = Stack(run_cfg)
    url = stack.services()["taskserver"].endpoint
    pid = stack.pid("taskserver")
    assert pid is not None and stack.revive(["taskserver"]) == []  # alive: nothing to do
    assert stack.pid("taskserver") == pid
    killed = stack.kill("taskserver")
    try:
        assert http_status(url, timeout=2) is None  # down
    finally:  # the session's later tests need the task server whatever happens here
        assert stack.revive(["taskserver"]) == ["taskserver"]
    assert stack.pid("taskserver") not in (None, killed)
    assert http_status(url, timeout=5) is not None
