"""Pruning of real application pages before the tree is truncated to its token budget.

A real page repeats itself and carries structure the agent cannot act on: a product card links
its picture and its title to the same page, a form labels a box with the box's own name, a
closed menu's items sit in the DOM, and every paragraph and table cell has an element id.  The
rules, applied to app tasks only (MiniWoB's observation is unchanged), in this order, before
``collectors.observation.truncate_lines`` cuts to the task's budget in model tokens:

1. **Repeated picture**: an ``img`` line whose name equals the next line's name is dropped (the
   picture link of a card whose title line follows; the title line keeps the element and its
   name).
2. **Empty container**: a line with neither id nor name nor properties is dropped and its
   children move up one level.
3. **Closed menu**: when the first child of a line is a ``collapsed`` ``haspopup`` control (a
   menu's toggle) and every other child of that line is a ``link``, ``menuitem`` or ``button``
   (the menu's items), those items and their subtrees are dropped.  Clicking the toggle opens
   the menu (it is then ``expanded``) and its items show.
4. **Repeated label**: a ``label`` line whose name equals the name of the line right before or
   right after it (the control it labels, which is named by it) is dropped.
5. **Repeated text**: a non-actionable leaf line without properties whose role and name equal
   the previous line's (a title printed twice) is dropped.
6. **Ids only where an action can use them**: a non-actionable line (text, heading, cell, row,
   list item ...) is shown without its ``[id]``: the ids are the costliest part of a line in
   tokens (one token per digit) and the action space acts on actionable lines.

Every element the agent can act on (``Line.actionable``) survives rules 1-6 unless it is a
repeated picture (rule 1; its title line leads to the same page) or the item of a closed menu
(rule 3).  Dropped lines keep their element ids on the page (an action on them still works);
the observation's ``truncation`` info counts them (``pruned``).  What does not fit after pruning
is cut by the documented truncation rule (non-actionable text first), counted in the model's
tokens (``collectors.webapps.prune.token_measure``).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

from collectors.observation import Line

MENU_ITEM_ROLES = frozenset({"link", "menuitem", "button"})
MIN_ITEMS = 3  # rule 7: a run of this many sibling items is a list
ITEM_SKIP_ROLES = frozenset({"row"})  # rule 7 leaves these alone (cells are read by position)
KEEP_BARE = frozenset({"row"})  # rule 8 keeps these (they delimit items)


def _props(ln: Line) -> set[str]:
    return {k for k, _ in ln.props}


def _closed_menus(lines: list[Line]) -> set[int]:
    """Indices of the items of closed menus (rule 3), with their subtrees."""
    drop: set[int] = set()
    for i, parent in enumerate(lines):
        kids = []
        j = i + 1
        while j < len(lines) and lines[j].depth > parent.depth:
            if lines[j].depth == parent.depth + 1:
                kids.append(j)
            j += 1
        if len(kids) < 2:
            continue
        toggle = lines[kids[0]]
        if not {"collapsed", "haspopup"} <= _props(toggle):
            continue
        items = kids[1:]
        if not all(lines[k].role in MENU_ITEM_ROLES and lines[k].actionable for k in items):
            continue
        drop.update(range(items[0], j))
    return drop


def prune_lines(lines: list[Line]) -> list[Line]:
    """Rules 1-6 of this module, in order; the lines shown, before truncation."""
    menus = _closed_menus(lines)
    kept: list[Line] = []
    lift: list[int] = []  # depths of dropped empty containers still open
    skip_below: int | None = None  # depth of a dropped subtree still open
    for i, ln in enumerate(lines):
        if skip_below is not None and ln.depth > skip_below:
            continue
        skip_below = None
        while lift and ln.depth <= lift[-1]:
            lift.pop()
        if i in menus:
            skip_below = ln.depth
            continue
        nxt = lines[i + 1] if i + 1 < len(lines) else None
        if ln.role == "img" and ln.name and nxt is not None and nxt.name == ln.name:
            continue
        if ln.id is None and not ln.name and not ln.props:
            lift.append(ln.depth)
            continue
        if lift:
            ln = Line(ln.depth - len(lift), ln.id, ln.role, ln.name, ln.props, ln.actionable)
        kept.append(ln)
    out: list[Line] = []
    for i, ln in enumerate(kept):
        prev = kept[i - 1] if i > 0 else None
        nxt = kept[i + 1] if i + 1 < len(kept) else None
        if (
            ln.role == "label"
            and ln.name
            and any(o is not None and o.name == ln.name for o in (prev, nxt))
        ):
            continue
        leaf = nxt is None or nxt.depth <= ln.depth
        if (
            prev is not None
            and leaf
            and not ln.actionable
            and not ln.props
            and ln.name
            and (prev.role, prev.name) == (ln.role, ln.name)
        ):
            continue
        if ln.id is not None and not ln.actionable:
            ln = Line(ln.depth, None, ln.role, ln.name, ln.props, ln.actionable)
        out.append(ln)
    out = _drop_repeated_item_text(out)
    return _lift_bare_containers(out)


def _subtree_end(lines: list[Line], i: int) -> int:
    j = i + 1
    while j < len(lines) and lines[j].depth > lines[i].depth:
        j += 1
    return j


def _drop_repeated_item_text(lines: list[Line]) -> list[Line]:
    """Rule 7: in a run of at least ``MIN_ITEMS`` sibling items of one role (list items, cards;
    not table rows, whose cells are read by position), a non-actionable leaf text whose
    (role, name) every item of the run carries is kept in the first item only."""
    drop: set[int] = set()
    i = 0
    while i < len(lines):
        ln = lines[i]
        end = _subtree_end(lines, i)
        if end == i + 1 or ln.role in ITEM_SKIP_ROLES:
            i += 1
            continue
        run = [(i, end)]
        j = end
        while j < len(lines) and lines[j].depth == ln.depth and lines[j].role == ln.role:
            k = _subtree_end(lines, j)
            if k == j + 1:
                break
            run.append((j, k))
            j = k
        if len(run) >= MIN_ITEMS:

            def texts(a: int, b: int) -> dict[tuple[str, str], int]:
                out: dict[tuple[str, str], int] = {}
                for k in range(a + 1, b):
                    x = lines[k]
                    leaf = k + 1 >= b or lines[k + 1].depth <= x.depth
                    if leaf and not x.actionable and x.id is None and not x.props and x.name:
                        out.setdefault((x.role, x.name), k)
                return out

            per = [texts(a, b) for a, b in run]
            common = set(per[0]).intersection(*per[1:])
            for p in per[1:]:
                drop.update(p[key] for key in common)
            i = j
        else:
            i += 1
    return [ln for k, ln in enumerate(lines) if k not in drop]


def _lift_bare_containers(lines: list[Line]) -> list[Line]:
    """Rule 8: a line left with neither id nor name nor properties that has children (a cell or
    a group around one control) is dropped and its children move up one level; table rows stay
    (they delimit the rows)."""
    out: list[Line] = []
    lift: list[int] = []
    for i, ln in enumerate(lines):
        while lift and ln.depth <= lift[-1]:
            lift.pop()
        has_kids = i + 1 < len(lines) and lines[i + 1].depth > ln.depth
        if has_kids and ln.id is None and not ln.name and not ln.props and ln.role not in KEEP_BARE:
            lift.append(ln.depth)
            continue
        if lift:
            ln = Line(ln.depth - len(lift), ln.id, ln.role, ln.name, ln.props, ln.actionable)
        out.append(ln)
    return out


@lru_cache(maxsize=4)
def token_measure(tokenizer: str = "bpe") -> Callable[[str], int]:
    """``text -> its token count`` in the tokenizer ``model.tokenizer`` names (``"bpe"``: the
    project's BPE, ``"byte"``: UTF-8 bytes): the unit of an app task's ``obs_budget``."""
    if tokenizer == "byte":
        return lambda s: len(s.encode())
    from models.lm.tokenizer import build_tokenizer, encode

    tok = build_tokenizer(tokenizer)
    return lambda s: len(encode(tok, s))
