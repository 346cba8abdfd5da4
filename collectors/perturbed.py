"""The perturbed expert (``collector.policy=perturbed``): near misses beside the successes.

The world model learns reward and done from real transitions, and successes alone teach it
little about what fails: the right field with the wrong text, the button next to the right one.
This agent is the scripted expert with, at each step and with probability
``collector.perturb_prob``, a near miss of the expert's action instead:

- ``click`` -> a click on another actionable element of the page (wrong element);
- ``select`` -> another option of the same list (wrong option);
- ``type`` -> the same field with mistyped text (a character dropped, swapped or replaced).

The experts read the page at every step, so a near miss would simply be undone and the
episode would still succeed (or, on a page of toggles, run out of steps undoing it).  When the
expert is about to undo a near miss of this agent, it submits instead (``premature_submit``:
the page's submit button, as the experts find it), so the failure is a near miss of the
success: the same form, one field wrong.  Undoing is retyping the field this agent has just
mistyped, or clicking again an element this agent clicked by mistake earlier in the episode
(a checkbox ticked in place of another: the expert would untick it).

Other actions (keys, scrolls, pointer actions, stop) are kept as the expert chose them.  Its
episodes are real interaction (source ``real``, published to the real-transitions topic and
counted as real steps wherever they are used); a perturbed step's transition carries
``info["perturbed"]`` with the kind of near miss.  It has no behaviour log-probs, so the policy
loss does not use its trajectories; the world model does.
"""

from __future__ import annotations

import random
import string
from collections import deque
from typing import Any

from collectors.experts.base import WAIT, submit
from collectors.observation import ACTIONABLE_ROLES
from core.pagetree import parse_tree
from core.spaces import Action, Observation, parse_action

KINDS = ("wrong_element", "wrong_option", "wrong_text", "premature_submit")


def mistype(text: str, rng: random.Random) -> str:
    """``text`` with one character dropped, two neighbours swapped or one replaced (never equal)."""
    if not text:
        return rng.choice(string.ascii_lowercase)
    for _ in range(8):
        i = rng.randrange(len(text))
        how = rng.randrange(3)
        if how == 0 and len(text) > 1:
            out = text[:i] + text[i + 1 :]
        elif how == 1 and i + 1 < len(text):
            out = text[:i] + text[i + 1] + text[i] + text[i + 2 :]
        else:
            out = text[:i] + rng.choice(string.ascii_letters + string.digits) + text[i + 1 :]
        if out != text:
            return out
    return text + rng.choice(string.ascii_lowercase)


def perturb(action: Action, obs: Observation, rng: random.Random) -> tuple[Action, str] | None:
    """A near miss of ``action`` on ``obs`` and its kind, or None when the page offers none."""
    nodes = parse_tree(obs.tree)
    if action.kind == "click" and action.element is not None:
        target = next((n for n in nodes if n.id == action.element), None)
        others = [
            n
            for n in nodes
            if n.id is not None
            and n.id != action.element
            and (n.role in ACTIONABLE_ROLES or "clickable" in n.props)
        ]
        # the button next to the right one: an element of the target's role where there is one
        same = [n for n in others if target is not None and n.role == target.role]
        pick = same or others
        return (Action.click(rng.choice(pick).id), "wrong_element") if pick else None
    if action.kind == "select" and action.element is not None:
        node = next((n for n in nodes if n.id == action.element), None)
        opts = [] if node is None else [
            nodes[i].name for i in node.children
            if nodes[i].role == "option" and nodes[i].name and nodes[i].name != action.text
        ]  # fmt: skip
        return (Action.select(action.element, rng.choice(opts)), "wrong_option") if opts else None
    if action.kind == "type" and action.element is not None:
        return Action.type(action.element, mistype(action.text or "", rng)), "wrong_text"
    return None


class PerturbedExpertAgent:
    """``expert`` (a ``collectors.agents.ExpertAgent``) with a near miss at each step with
    probability ``p``; source ``real``."""

    source = "real"
    wants_tasks = True
    policy_version = 0
    world_model_version = 0

    def __init__(self, expert: Any, p: float = 0.25, seed: int | None = None):
        self.expert = expert
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"collector.perturb_prob must be in [0, 1], got {p}")
        self.p, self.rng = float(p), random.Random(seed)
        self.perturbed = {k: 0 for k in KINDS}
        self.recent: deque[str] = deque(maxlen=256)  # the mistyped actions it emitted lately
        # the wrong clicks it emitted lately, with their page's instruction (one episode's)
        self.wrong_clicks: deque[tuple[str, str]] = deque(maxlen=256)

    def supports(self, task: str) -> bool:
        return self.expert.supports(task)

    async def act(
        self, obs_list: list[Observation], histories: list[list], tasks: list[str] | None = None
    ) -> list:
        out = []
        for obs, hist, (a, lp, nt) in zip(
            obs_list, histories, await self.expert.act(obs_list, histories, tasks), strict=True
        ):
            miss = self._commit_instead(a, obs, hist)
            if miss is None and a != WAIT and self.rng.random() < self.p:
                miss = perturb(a, obs, self.rng)
            if miss is None:
                out.append((a, lp, nt))
                continue
            self.perturbed[miss[1]] += 1
            if miss[1] == "wrong_text":
                self.recent.append(miss[0].to_text())
            elif miss[1] == "wrong_element":
                self.wrong_clicks.append((obs.instruction, miss[0].to_text()))
            out.append((miss[0], lp, nt, {"perturbed": miss[1]}))
        return out

    def _commit_instead(self, a: Action, obs: Observation, hist: list) -> tuple[Action, str] | None:
        """The page's submit click when the expert is about to undo a near miss of this agent:
        retype the field it has just mistyped (the previous action), or click again an element
        it clicked by mistake earlier in this episode; else None."""
        if not hist or not self._undoes(a, obs, hist):
            return None
        commit = submit(parse_tree(obs.tree))
        return (commit, "premature_submit") if commit is not None and commit != a else None

    def _undoes(self, a: Action, obs: Observation, hist: list) -> bool:
        if a.kind == "click":
            text = a.to_text()
            return (obs.instruction, text) in self.wrong_clicks and text in {
                _action_text(h) for h in hist
            }
        if a.kind != "type" or _action_text(hist[-1]) not in self.recent:
            return False
        try:
            last = parse_action(_action_text(hist[-1]))
        except ValueError:
            return False
        return last.element == a.element


def _action_text(entry: Any) -> str:
    """The action of a history entry as text (a collector's history holds (obs, action))."""
    act = entry[1] if isinstance(entry, tuple) else entry
    return act.to_text() if isinstance(act, Action) else str(act)
