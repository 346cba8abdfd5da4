"""Pruning of real application pages before the tree is truncated to its budget.

A real page repeats itself: a product card links its picture and its title to the same page,
so the tree carries the name twice.  The rule, applied to app tasks only (MiniWoB's
observation is unchanged), before ``collectors.observation.truncate_lines``:

1. an ``img`` line whose name equals the next line's name is dropped (the picture link of a
   card whose title line follows; the title line keeps the element and its name);
2. a line with neither id nor name nor properties (an empty container) is dropped and its
   children move up one level.

Dropped lines keep their element ids on the page (an action on them still works); the
observation's ``truncation`` info counts them (``pruned``).  What does not fit after pruning is
cut by the documented truncation rule (non-actionable text first).
"""

from __future__ import annotations

from collectors.observation import Line


def prune_lines(lines: list[Line]) -> list[Line]:
    out: list[Line] = []
    lift: list[int] = []  # depths of dropped empty containers still open
    for i, ln in enumerate(lines):
        while lift and ln.depth <= lift[-1]:
            lift.pop()
        nxt = lines[i + 1] if i + 1 < len(lines) else None
        if ln.role == "img" and ln.name and nxt is not None and nxt.name == ln.name:
            continue
        if ln.id is None and not ln.name and not ln.props:
            lift.append(ln.depth)
            continue
        if lift:
            ln = Line(ln.depth - len(lift), ln.id, ln.role, ln.name, ln.props, ln.actionable)
        out.append(ln)
    return out
