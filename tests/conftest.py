"""Session fixtures: the real embedded stack (SeaweedFS S3, Tansu, task server,
Prometheus) on free loopback ports in a temporary home.  A service that cannot
start fails the run (it is never skipped).

Every test is marked with its tier, the folder it lives in (``TIERS``), so ``pytest -m unit``
runs the unit tests alone and ``pytest -m "not unit"`` the rest (tests/unit/test_tiers.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.config import Config
from tests.support import fresh_run, stack_config

TESTS = Path(__file__).resolve().parent
TIERS = ("unit", "integration", "e2e", "faults")  # folders of tests/, each its marker


@pytest.hookimpl(tryfirst=True)  # before -m deselects
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        try:
            tier = item.path.resolve().relative_to(TESTS).parts[0]
        except ValueError:  # not under tests/
            continue
        if tier in TIERS:
            item.add_marker(tier)


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory):
    from infra.stack import Stack

    cfg = stack_config(str(tmp_path_factory.mktemp("dynaweb-home")))
    st = Stack(cfg)
    try:
        st.up()
    except Exception as e:  # noqa: BLE001 - report which service failed, then fail the run
        st.down()
        pytest.fail(f"the embedded stack did not start: {e}", pytrace=False)
    yield cfg
    st.down()


@pytest.fixture
def run_cfg(stack: Config) -> Config:
    """The stack's config with a fresh run id (unique topics and S3 prefix)."""
    return fresh_run(stack)
