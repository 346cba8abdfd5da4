"""What every scripted expert shares: the ``Expert`` protocol, ``WAIT``, and small readers.

An expert reads ``obs.instruction`` and the page's nodes (``core.pagetree.parse_tree`` of
``obs.tree``) and returns the next ``Action``, or None when there is nothing to do yet (the page
is still changing): ``Expert.act`` then returns ``WAIT`` and, after ``max_waits`` waits in a row,
gives up with ``stop()``.  ``quoted`` / ``ordinal`` read the instruction; ``submit``,
``fill_then``, ``textboxes``, ``field_for``, ``label_before`` / ``label_after`` and
``click_named`` are the moves and look-ups the task families (``collectors.experts.*``) share.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from core.pagetree import CLICKABLE_TEXT, TEXTBOX, Node, find, first, parse_tree
from core.spaces import Action, Observation

ORDINALS = {
    "1st": 1,
    "2nd": 2,
    "3rd": 3,
    "4th": 4,
    "5th": 5,
    "6th": 6,
    "7th": 7,
    "8th": 8,
    "9th": 9,
    "10th": 10,
    "first": 1,
    "second": 2,
    "third": 3,
    "fourth": 4,
    "fifth": 5,
}

# A no-op used while the page is still changing.  Not a key press: keyboard widgets
# (jQuery UI autocomplete) restart their timers on any keydown.
WAIT = Action.scroll("up")


def quoted(text: str) -> list[str]:
    return re.findall(r'"([^"]*)"', text)


def ordinal(text: str) -> int | None:
    m = re.search(r"\b(\d+)(?:st|nd|rd|th)\b", text)
    if m:
        return int(m.group(1))
    for k, v in ORDINALS.items():
        if re.search(rf"\b{k}\b", text):
            return v
    return None


class Expert:
    """Base: subclasses implement ``decide(instruction, nodes, obs, history)``.

    When an expert has nothing to do yet (the page is still changing) it returns
    ``WAIT`` (``scroll("up")``, a no-op on these pages); drivers then pause ``wait_s`` seconds
    before the next step, as a person would.  After ``max_waits`` waits in a row it
    gives up with ``stop()``.
    """

    name = "expert"
    wait_s = 0.1
    max_waits = 15  # then give up with stop(): the expert cannot solve this page

    def act(self, obs: Observation, history: list | None = None) -> Action:
        history = history or []
        nodes = parse_tree(obs.tree)
        a = self.decide(obs.instruction, nodes, obs, history)
        if a is not None:
            return a
        waits = 0
        for _, prev in reversed(history):
            if prev != WAIT:
                break
            waits += 1
        return Action.stop() if waits >= self.max_waits else WAIT

    def decide(
        self, instr: str, nodes: list[Node], obs: Observation, history: list
    ) -> Action | None:
        raise NotImplementedError


class FuncExpert(Expert):
    def __init__(self, name: str, fn: Callable):
        self.name = name
        self.fn = fn

    def decide(self, instr, nodes, obs, history):
        return self.fn(instr, nodes, obs, history)


def click_named(nodes: list[Node], name: str, roles=None) -> Action | None:
    n = first(nodes, role=roles, name=name)
    return Action.click(n.id) if n else None


def submit(
    nodes: list[Node],
    label: str | tuple = ("Submit", "submit", "Search", "Login", "Go!", "OK", "Ok"),
) -> Action | None:
    labels = (label,) if isinstance(label, str) else label
    for lb in labels:
        n = first(nodes, role=("button",), name=lb)
        if n:
            return Action.click(n.id)
    for lb in labels:
        n = first(nodes, role=CLICKABLE_TEXT, name=lb)
        if n:
            return Action.click(n.id)
    return None


def textboxes(nodes: list[Node]) -> list[Node]:
    return find(nodes, role=TEXTBOX, pred=lambda n: not n.has("disabled"))


def fill_then(
    nodes: list[Node], pairs: list[tuple[Node, str]], then: Action | None
) -> Action | None:
    for box, text in pairs:
        if box.value != text:
            return Action.type(box.id, text)
    return then


def label_before(nodes: list[Node], n: Node) -> str:
    """The text of the line just before ``n`` (a label / text / header naming a field)."""
    for i in range(n.index - 1, -1, -1):
        p = nodes[i]
        if p.role in ("label", "text", "columnheader", "cell") and p.name:
            return p.name
        if p.role in TEXTBOX or p.role in ("button",):
            return ""
    return ""


def label_after(nodes: list[Node], n: Node) -> str:
    for i in range(n.index + 1, len(nodes)):
        p = nodes[i]
        if p.role in ("label", "text", "columnheader", "cell") and p.name:
            return p.name
        if p.role in TEXTBOX or p.role == "button":
            return ""
    return ""


def field_for(nodes: list[Node], label: str) -> Node | None:
    label = label.lower().strip(": ")
    for box in textboxes(nodes):
        nm = (box.name or label_before(nodes, box)).lower().strip(": ")
        if nm == label or nm.startswith(label):
            return box
    return None
