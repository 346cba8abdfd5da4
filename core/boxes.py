"""Geometry on the observation's boxes (``box="x,y,w,h"``, viewport CSS pixels; see
``collectors.observation``), shared by the policy's candidate enumeration
(``models.policy.candidates``) and the scripted experts, so that both name the same positions.

A position in an action is relative to the top-left of an element's box (``core.spaces``):
``rel(owner, x, y)`` turns a viewport point into one relative to ``owner``'s box.
"""

from __future__ import annotations

Box = tuple[int, int, int, int]


def centre(box: Box) -> tuple[float, float]:
    x, y, w, h = box
    return x + w / 2, y + h / 2


def rel(owner: Box, x: float, y: float) -> tuple[int, int]:
    """Viewport point (x, y) relative to the top-left of ``owner``, rounded."""
    return round(x - owner[0]), round(y - owner[1])


def drop_point(item: Box, target: Box) -> tuple[int, int]:
    """Where to drop ``item`` on ``target`` (relative to ``target``'s box): a quarter of the box
    past its middle in the direction of the move, so a sortable list, which re-orders once the
    pointer crosses an item's middle, takes the item's place."""
    ix, iy = centre(item)
    tx, ty = centre(target)
    dx = 0.25 if tx > ix + 1 else (-0.25 if tx < ix - 1 else 0.0)
    dy = 0.25 if ty > iy + 1 else (-0.25 if ty < iy - 1 else 0.0)
    return round(target[2] * (0.5 + dx)), round(target[3] * (0.5 + dy))


NUDGE_PX = 20
NUDGES = {
    "left": (-NUDGE_PX, 0),
    "right": (NUDGE_PX, 0),
    "up": (0, -NUDGE_PX),
    "down": (0, NUDGE_PX),
}


def nudge_point(shape: Box, owner: Box, direction: str) -> tuple[int, int]:
    """``shape``'s centre moved ``NUDGE_PX`` towards ``direction``, relative to ``owner``."""
    cx, cy = centre(shape)
    dx, dy = NUDGES[direction]
    return rel(owner, cx + dx, cy + dy)


def midpoint(a: Box, b: Box) -> tuple[float, float]:
    (ax, ay), (bx, by) = centre(a), centre(b)
    return (ax + bx) / 2, (ay + by) / 2
