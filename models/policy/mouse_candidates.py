"""The pointer/selection part of the policy's action set C(s).

``pointer_candidates(obs, nodes, texts)`` adds, from the boxes in the observation
(``box="x,y,w,h"``: SVG/canvas elements, the shapes of an SVG, draggable elements), the
``hover`` / ``click_at`` / ``drag`` / ``select_text`` actions and key chords a page offers.
Positions come from ``core.boxes``, the same functions the scripted experts use.  To keep the
candidate sets of the other pages as they were, each family is added only where it applies:

* drag, when the instruction asks to drag, sort or draw (``_DRAG_WORDS``): every draggable
  element onto every other one (a list item past the target's middle, ``drop_point``; another
  element on its centre), every SVG shape onto every other shape, and every SVG shape
  ``NUDGE_PX`` and twice that left/right/up/down (a point relative to its SVG);
* click_at, on a page with an SVG or canvas: the SVG/canvas's centre, every shape's centre and
  the midpoint of every pair of circles (relative to the SVG);
* hover, when the instruction speaks of the mouse or hovering: every SVG shape;
* select_text, when the instruction asks to highlight, or to style/colour text: every named
  ``text`` line's whole text, and every text-field value and every single word of it;
* chords ``Control+a/b/i/u``, when there is an editable element and the instruction speaks of
  a style.

The families come after the other candidates, so the cap (``MAX_CANDIDATES``) cuts them first.
"""

from __future__ import annotations

import re

from core.boxes import NUDGE_PX, Box, centre, drop_point, midpoint, rel
from core.pagetree import Node
from core.spaces import Action

_DRAG_WORDS = re.compile(r"\b(drag|sort|draw)", re.I)
_MOUSE_WORDS = re.compile(r"\b(mouse|hover)", re.I)
_SELECT_WORDS = re.compile(r"\b(highlight|style|colou?r)", re.I)
_STYLE_WORDS = re.compile(r"\bstyle\b", re.I)
OWNERS = ("svg", "canvas")
CHORDS = ("Control+a", "Control+b", "Control+i", "Control+u")


def _boxed(nodes: list[Node]) -> list[tuple[Node, Box]]:
    return [(n, n.box) for n in nodes if n.id is not None and n.box is not None]


def _owner_of(nodes: list[Node], n: Node) -> Node | None:
    p = nodes[n.parent] if n.parent is not None else None
    return p if p is not None and p.role in OWNERS and p.box is not None else None


def _drags(nodes: list[Node], boxed: list[tuple[Node, Box]]) -> list[Action]:
    out: list[Action] = []
    loose = [(n, b) for n, b in boxed if n.role not in OWNERS and _owner_of(nodes, n) is None]
    for n, b in loose:
        for t, tb in loose:
            if t is not n:
                point = drop_point(b, tb) if n.role == "listitem" else None
                out.append(Action.drag(n.id, t.id, *point) if point else Action.drag(n.id, t.id))
    for n, b in boxed:
        owner = _owner_of(nodes, n)
        if owner is None:
            continue
        out += [
            Action.drag(n.id, t.id) for t, _ in boxed if t is not n and _owner_of(nodes, t) is owner
        ]
        cx, cy = centre(b)
        for k in (1, 2):
            for dx, dy in ((-1, 0), (1, 0), (0, -1), (0, 1)):
                x, y = rel(owner.box, cx + dx * k * NUDGE_PX, cy + dy * k * NUDGE_PX)
                out.append(Action.drag(n.id, owner.id, x, y))
    return out


def _clicks_at(nodes: list[Node], boxed: list[tuple[Node, Box]]) -> list[Action]:
    out: list[Action] = []
    for owner, ob in boxed:
        if owner.role not in OWNERS:
            continue
        out.append(Action.click_at(owner.id, *rel(ob, *centre(ob))))
        shapes = [(n, b) for n, b in boxed if _owner_of(nodes, n) is owner]
        out += [Action.click_at(owner.id, *rel(ob, *centre(b))) for _, b in shapes]
        circles = [b for n, b in shapes if n.role == "circle"]
        for i, a in enumerate(circles):
            out += [Action.click_at(owner.id, *rel(ob, *midpoint(a, c))) for c in circles[i + 1 :]]
    return out


def _selections(nodes: list[Node]) -> list[Action]:
    out: list[Action] = []
    for n in nodes:
        if n.id is None:
            continue
        if n.role == "text" and n.name and not n.name.endswith("…"):
            out.append(Action.select_text(n.id, n.name))
        value = n.props.get("value") or ""
        if n.role == "textbox" and value:
            out.append(Action.select_text(n.id, value))
            out += [Action.select_text(n.id, w) for w in value.split() if w != value]
    return out


def pointer_candidates(obs_instruction: str, nodes: list[Node]) -> list[Action]:
    """The pointer/selection candidates of a page (read with ``parse_tree(..., loose=True)``)."""
    boxed = _boxed(nodes)
    out: list[Action] = []
    if boxed and _DRAG_WORDS.search(obs_instruction):
        out += _drags(nodes, boxed)
    out += _clicks_at(nodes, boxed)
    if _MOUSE_WORDS.search(obs_instruction):
        out += [Action.hover(n.id) for n, _ in boxed if _owner_of(nodes, n) is not None]
    if _SELECT_WORDS.search(obs_instruction):
        out += _selections(nodes)
    if _STYLE_WORDS.search(obs_instruction) and any(n.role == "textbox" for n in nodes):
        out += [Action.press(k) for k in CHORDS]
    return out
