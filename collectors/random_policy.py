"""A random policy over the valid actions of an observation.

Used so that real data also holds failures (and for exploration).  Only
actions that make sense for the current tree are drawn: clicks on actionable
elements (and, less often, on any element with an id), ``type`` into text
fields with words taken from the instruction or the page, ``select`` of an
option that a ``<select>`` lists, a key press, a scroll, and rarely
``go_back`` / ``stop``.
"""

from __future__ import annotations

import random
import re

from collectors.observation import ACTIONABLE_ROLES
from core.pagetree import TEXTBOX, parse_tree
from core.spaces import KEYS, Action, Observation

_WORDS = ("hello", "test", "yes", "no", "1", "42", "Submit")


def valid_actions(obs: Observation, max_per_kind: int = 50) -> list[Action]:
    """Every action the random policy may draw for ``obs`` (for inspection and tests)."""
    nodes = parse_tree(obs.tree)
    acts: list[Action] = []
    words = _words(obs)
    for n in nodes:
        if n.id is None:
            continue
        if n.role in ACTIONABLE_ROLES or "clickable" in n.props or n.role == "generic":
            acts.append(Action.click(n.id))
        if n.role in TEXTBOX:
            acts += [Action.type(n.id, w) for w in words[:5]]
        if n.role in ("combobox", "listbox"):
            opts = [
                nodes[i].name for i in n.children if nodes[i].role == "option" and nodes[i].name
            ]
            acts += [Action.select(n.id, o) for o in opts[:max_per_kind]]
    acts += [Action.press(k) for k in KEYS]
    acts += [Action.scroll("up"), Action.scroll("down"), Action.go_back(), Action.stop()]
    return acts


def _words(obs: Observation) -> list[str]:
    q = re.findall(r'"([^"]*)"', obs.instruction)
    toks = re.findall(r"[A-Za-z0-9@.]+", obs.instruction)
    return [w for w in q if w] + toks[-5:] + list(_WORDS)


class RandomPolicy:
    """``act(obs, history) -> Action``; weights favour clicks and typing."""

    name = "random"

    def __init__(self, seed: int | None = None, p_stop: float = 0.02, p_back: float = 0.02):
        self.rng = random.Random(seed)
        self.p_stop = p_stop
        self.p_back = p_back

    def act(self, obs: Observation, history: list | None = None) -> Action:
        rng = self.rng
        r = rng.random()
        if r < self.p_stop:
            return Action.stop()
        if r < self.p_stop + self.p_back:
            return Action.go_back()
        nodes = parse_tree(obs.tree)
        words = _words(obs)
        clicks, types, selects = [], [], []
        for n in nodes:
            if n.id is None:
                continue
            if n.role in TEXTBOX and "disabled" not in n.props:
                types.append(n)
            if n.role in ("combobox", "listbox"):
                opts = [
                    nodes[i].name for i in n.children if nodes[i].role == "option" and nodes[i].name
                ]
                if opts:
                    selects.append((n, opts))
            if n.role in ACTIONABLE_ROLES or "clickable" in n.props:
                clicks.append(n)
        others = [n for n in nodes if n.id is not None and n not in clicks]
        r = rng.random()
        if types and r < 0.25:
            n = rng.choice(types)
            return Action.type(n.id, rng.choice(words))
        if selects and r < 0.35:
            n, opts = rng.choice(selects)
            return Action.select(n.id, rng.choice(opts))
        if clicks and r < 0.85:
            return Action.click(rng.choice(clicks).id)
        if others and r < 0.9:
            return Action.click(rng.choice(others).id)
        if r < 0.95:
            return Action.press(rng.choice(KEYS))
        return Action.scroll(rng.choice(("up", "down")))
