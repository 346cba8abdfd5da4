"""The perturbed expert's near misses (collectors/perturbed.py)."""

from __future__ import annotations

import asyncio
import random

import pytest

from collectors.agents import default_agent_factory
from collectors.perturbed import PerturbedExpertAgent, mistype, perturb
from core.config import load_config
from core.spaces import Action, Observation

PAGE = Observation(
    instruction='Select "Blue", type "cat" and press OK',
    url="http://127.0.0.1/miniwob/x.html",
    tree='[1] textbox "name"\n[2] combobox "colour"\n  [3] option "Red"\n  [4] option "Blue"\n'
    '  [5] option "Green"\n[6] button "OK"\n[7] button "Cancel"\n[8] text "hello"',
    next_id=9,
)


@pytest.mark.parametrize("seed", range(30))
def test_mistype_changes_the_text_by_one_edit(seed: int) -> None:
    rng = random.Random(seed)
    for text in ("cat", "a", "", "hello world"):
        out = mistype(text, rng)
        assert out != text and abs(len(out) - len(text)) <= 1


def test_near_misses_keep_the_kind_and_change_the_target() -> None:
    rng = random.Random(0)
    seen_clicks = set()
    for _ in range(40):
        a, kind = perturb(Action.click(1), PAGE, rng)  # the only textbox: any other actionable
        assert kind == "wrong_element" and a.kind == "click" and a.element not in (1, 8)
        seen_clicks.add(a.element)
        a, kind = perturb(Action.select(2, "Blue"), PAGE, rng)
        assert kind == "wrong_option" and a.element == 2 and a.text in ("Red", "Green")
        a, kind = perturb(Action.type(1, "cat"), PAGE, rng)
        assert kind == "wrong_text" and a.element == 1 and a.text != "cat"
    assert len(seen_clicks) >= 2  # a text without an id or role is never a target
    assert perturb(Action.press("Enter"), PAGE, rng) is None
    assert (
        perturb(Action.click(1), Observation("x", "", '[1] button "only"', next_id=2), rng) is None
    )


class _Expert:
    def __init__(self) -> None:
        self.calls = 0

    def supports(self, task: str) -> bool:
        return task == "miniwob/x"

    async def act(self, obs_list, histories, tasks=None):
        self.calls += 1
        return [(Action.click(6), None, 0) for _ in obs_list]


def test_the_agent_misses_at_about_its_rate_and_says_so() -> None:
    agent = PerturbedExpertAgent(_Expert(), p=0.3, seed=1)
    assert agent.source == "real" and agent.supports("miniwob/x") and not agent.supports("y")
    out = []
    for _ in range(400):
        out += asyncio.run(agent.act([PAGE], [[]], ["miniwob/x"]))
    missed = [x for x in out if len(x) == 4]
    assert 0.2 < len(missed) / len(out) < 0.4
    assert all(x[3] == {"perturbed": "wrong_element"} and x[0] != Action.click(6) for x in missed)
    assert agent.perturbed["wrong_element"] == len(missed)
    assert all(x[0] == Action.click(6) for x in out if len(x) == 3)
    never = PerturbedExpertAgent(_Expert(), p=0.0)
    assert all(len(x) == 3 for x in asyncio.run(never.act([PAGE] * 5, [[]] * 5, ["miniwob/x"] * 5)))
    with pytest.raises(ValueError, match="perturb_prob"):
        PerturbedExpertAgent(_Expert(), p=1.5)


def test_collector_policy_perturbed_is_a_config_choice() -> None:
    cfg = load_config(
        env={}, overrides={"collector.policy": "perturbed", "collector.perturb_prob": "0.5"}
    )
    agent = default_agent_factory(cfg)
    assert isinstance(agent, PerturbedExpertAgent) and agent.p == 0.5


def test_up_starts_the_perturbed_collectors_it_is_asked_for() -> None:
    from infra.up import component_argv

    cfg = load_config(env={}, overrides={"up.perturbed_collectors": "2"})
    argv = component_argv(cfg)
    names = [n for n in argv if n.startswith("collector-perturbed-")]
    assert names == ["collector-perturbed-0", "collector-perturbed-1"]
    assert argv[names[0]][argv[names[0]].index("--policy") + 1] == "perturbed"
    assert not any(n.startswith("collector-perturbed") for n in component_argv(load_config(env={})))


class _FormExpert:
    """Types "cat" into field 1 until it holds it, then clicks OK (6)."""

    def supports(self, task: str) -> bool:
        return True

    async def act(self, obs_list, histories, tasks=None):
        return [(Action.type(1, "cat"), None, 0) for _ in obs_list]


def test_a_mistyped_field_is_submitted_not_corrected() -> None:
    agent = PerturbedExpertAgent(_FormExpert(), p=1.0, seed=0)
    (first,) = asyncio.run(agent.act([PAGE], [[]]))
    assert first[3] == {"perturbed": "wrong_text"} and first[0].text != "cat"
    # the collector's history holds (observation, action); the expert would retype field 1
    (second,) = asyncio.run(agent.act([PAGE], [[(PAGE, first[0])]]))
    assert second[0] == Action.click(6) and second[3] == {"perturbed": "premature_submit"}
    # a field typed correctly before is not a reason to submit
    (third,) = asyncio.run(agent.act([PAGE], [[(PAGE, Action.type(1, "cat"))]]))
    assert third[3]["perturbed"] == "wrong_text"


def test_a_wrong_click_prefers_the_targets_role() -> None:
    rng = random.Random(0)
    assert {perturb(Action.click(6), PAGE, rng)[0].element for _ in range(20)} == {7}


BOXES = Observation(
    instruction="Select b and click Submit.",
    url="http://127.0.0.1/miniwob/click-checkboxes.html",
    tree='[1] checkbox "a"\n[2] checkbox "b"\n[3] checkbox "c"\n[4] button "Submit"',
    next_id=5,
)


class _ScriptExpert:
    """Answers each call with the next action of its script."""

    def __init__(self, *actions: Action) -> None:
        self.actions = list(actions)

    def supports(self, task: str) -> bool:
        return True

    async def act(self, obs_list, histories, tasks=None):
        return [(self.actions.pop(0), None, 0) for _ in obs_list]


def test_a_wrong_click_is_submitted_not_undone() -> None:
    """A box ticked in place of the asked one: where the expert would click it again (untick
    it), the agent clicks Submit, so the episode ends one box wrong instead of running out of
    steps undoing near misses."""
    agent = PerturbedExpertAgent(_ScriptExpert(Action.click(2)), p=1.0, seed=0)
    (first,) = asyncio.run(agent.act([BOXES], [[]]))
    assert first[3] == {"perturbed": "wrong_element"} and first[0].element in (1, 3)
    wrong = first[0]
    agent.expert = _ScriptExpert(Action.click(2), wrong)
    agent.p = 0.0
    hist = [(BOXES, wrong)]
    (second,) = asyncio.run(agent.act([BOXES], [hist]))  # the expert ticks the asked box
    assert second[0] == Action.click(2) and len(second) == 3
    hist.append((BOXES, second[0]))
    (third,) = asyncio.run(agent.act([BOXES], [hist]))  # ... then would untick the wrong one
    assert third[0] == Action.click(4) and third[3] == {"perturbed": "premature_submit"}


def test_an_expert_click_repeated_is_not_a_reason_to_submit() -> None:
    agent = PerturbedExpertAgent(_ScriptExpert(Action.click(2), Action.click(2)), p=0.0)
    (out,) = asyncio.run(agent.act([BOXES], [[(BOXES, Action.click(2))]]))
    assert out[0] == Action.click(2) and len(out) == 3
    # a wrong click of another episode (another instruction) is not this episode's
    other = Observation("Select a and click Submit.", BOXES.url, BOXES.tree, next_id=5)
    agent.wrong_clicks.append((other.instruction, "click(2)"))
    (out,) = asyncio.run(agent.act([BOXES], [[(BOXES, Action.click(2))]]))
    assert out[0] == Action.click(2) and len(out) == 3
    # the submit click itself is never replaced by itself
    agent.wrong_clicks.append((BOXES.instruction, "click(4)"))
    agent.expert = _ScriptExpert(Action.click(4))
    (out,) = asyncio.run(agent.act([BOXES], [[(BOXES, Action.click(4))]]))
    assert out[0] == Action.click(4) and len(out) == 3
