"""A live step is stamped with the policy version that acted (``collectors.agents._Acting``).

The race behind ``bench reload``'s group that mixed policy versions beyond ``max_staleness``
(docs/reliability.md, "The version a live step carries"): ``_Acting`` read the agent's version
before calling it, and the ``latest`` agent's call first installs whatever checkpoint is ready.
A collector's first act, which loads version 0, was stamped -1; its group went on until
version 2 was in use, so it spanned -1 to 2 (3 > 2).  Deterministic here: the fake's install
happens inside the call, as the real ``LatestPolicyAgent._refresh`` does."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from collectors.agents import _Acting
from collectors.policy_agent import LatestPolicyAgent
from collectors.run import LatestAgentAdapter
from core.config import Config
from core.spaces import Action

pytestmark = pytest.mark.unit


class FakeRunner:
    def __init__(self, version: int):
        self.policy_version = version

    def act_info(self, observations, histories, temperature=1.0):
        return [
            (Action("click", element=1), -0.5, 3, {"candidates_hash": "h"}) for _ in observations
        ]


def _latest_agent(loaded: int | None, ready: int | None) -> LatestAgentAdapter:
    """The real ``LatestPolicyAgent.act`` over a slot holding ``loaded`` (None: nothing yet) with
    ``ready`` prefetched: its refresh, inside the act, installs ``ready``."""
    inner = LatestPolicyAgent(Config(), SimpleNamespace(version=loaded))  # not started
    inner._runner = None if loaded is None else FakeRunner(loaded)
    inner.reload_clock = SimpleNamespace(used=lambda v: None)

    def refresh() -> None:
        if ready is not None and inner.slot.version != ready:
            inner.slot.version = ready
            inner._runner = FakeRunner(ready)

    inner._refresh = refresh
    return LatestAgentAdapter(inner)


@pytest.mark.parametrize("batched", [False, True])
@pytest.mark.parametrize(("loaded", "ready"), [(None, 0), (1, 2), (3, None)])
def test_a_step_carries_the_version_that_acted(loaded, ready, batched) -> None:
    agent = _latest_agent(loaded, ready)
    before = agent.policy_version
    assert before == (-1 if loaded is None else loaded)
    acting = _Acting(agent, slots=1)
    if batched:
        acting.wait = 0.001

    async def one() -> tuple:
        try:
            return await acting.act(None, [], "miniwob/click-button")
        finally:
            acting.close()

    action, logp, ntok, pv, wv, info = asyncio.run(one())
    acted = ready if ready is not None else loaded
    assert pv == acted  # before the fix: `before` (-1 for the first act, 1 for the reload to 2)
    assert "policy_version" not in info and info["candidates_hash"] == "h"
    assert logp == -0.5 and ntok == 3


def test_an_agent_that_reports_no_version_keeps_the_one_read_before() -> None:
    agent = SimpleNamespace(
        policy_version=7,
        world_model_version=0,
        act=lambda obs, hists: [(Action("click", element=1), None, 0, {}) for _ in obs],
    )
    acting = _Acting(agent, slots=1)
    assert asyncio.run(acting.act(None, [], "t"))[3] == 7
