"""Next-page proposals for the pointer actions, for ``models.world_model.proposals``'s
``candidate_trees`` (``decode="rerank"``).

Pure text functions on the page's lines (``[id] role "name" ... box="x,y,w,h"``):

* ``drag(d, t)`` of an element onto another one at the same depth (a sortable list, the jQuery
  UI lists of MiniWoB): line ``d`` moved to ``t``'s place, the lines in between shifted;
* a drag that drops at a position (``drag(d, owner, x, y)``): line ``d``'s box moved so that
  its centre lands on that point of ``owner``'s box.

hover / click_at / select_text have no proposal of their own here: the unchanged page (always a
proposal) is what they most often give; anything else the model writes in the change format,
which edits lines whatever they hold (``models.world_model.change``).
"""

from __future__ import annotations

import re

from core.pagetree import parse_box
from core.spaces import Action
from models.world_model.change import line_id

_BOX = re.compile(r' box="([^"]*)"')


def _depth(line: str) -> int:
    return (len(line) - len(line.lstrip(" "))) // 2


def _box_of(line: str) -> tuple[int, int, int, int] | None:
    m = _BOX.search(line)
    return parse_box(m.group(1)) if m else None


def _with_box(line: str, box: tuple[int, int, int, int]) -> str:
    return _BOX.sub(lambda _m: ' box="' + ",".join(str(v) for v in box) + '"', line, count=1)


def drag_trees(lines: list[str], action: Action) -> list[str]:
    """The pages a drag plausibly gives (none for other actions, or when an id is missing)."""
    if action.kind != "drag":
        return []
    at = {line_id(x): i for i, x in enumerate(lines) if line_id(x) is not None}
    d, t = at.get(action.element), at.get(action.target)
    if d is None or t is None:
        return []
    out: list[str] = []
    if _depth(lines[d]) == _depth(lines[t]):  # a sortable list: d takes t's place
        moved = list(lines)
        line = moved.pop(d)
        moved.insert(t, line)
        out.append("\n".join(moved))
    box, owner = _box_of(lines[d]), _box_of(lines[t])
    if box is not None and owner is not None:
        x, y, w, h = box
        ox, oy, ow, oh = owner
        px = ox + (action.x if action.x is not None else ow / 2)
        py = oy + (action.y if action.y is not None else oh / 2)
        moved = list(lines)
        moved[d] = _with_box(lines[d], (round(px - w / 2), round(py - h / 2), w, h))
        out.append("\n".join(moved))
    return out
