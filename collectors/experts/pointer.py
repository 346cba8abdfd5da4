"""Experts for the tasks the pointer actions open: drag, select_text, click_at.

They read boxes (``box="x,y,w,h"``, viewport CSS pixels) from the observation: draggable items
(jQuery UI draggables and sortable lists), an SVG and its shapes.  A position in an action is
relative to the named element's box (``core.spaces``), so ``_rel`` turns a viewport point into
one relative to the SVG.
"""

from __future__ import annotations

import re

from collectors.experts.base import submit
from core.boxes import drop_point
from core.pagetree import Node, find, first
from core.spaces import Action

_SHAPE_TAGS = ("circle", "rect", "polygon", "ellipse", "path", "line", "polyline", "text")


def _dragged(history: list) -> int:
    return sum(1 for _, a in history if a.kind == "drag")


def _centre(n: Node) -> tuple[float, float]:
    x, y, w, h = n.box or (0, 0, 0, 0)
    return x + w / 2, y + h / 2


def _svg(nodes: list[Node]) -> Node | None:
    return first(nodes, role="svg")


def _rel(box_owner: Node, x: float, y: float) -> tuple[int, int]:
    bx, by, _, _ = box_owner.box or (0, 0, 0, 0)
    return round(x - bx), round(y - by)


def _drop_at(item: Node, target: Node) -> Action:
    """Drag list item ``item`` onto ``target``, past the target's middle (``core.boxes``)."""
    return Action.drag(item.id, target.id, *drop_point(item.box, target.box))


def drag_box(instr, nodes, obs, history):
    if _dragged(history):
        return submit(nodes)
    small, large = first(nodes, name="s"), first(nodes, name="L")
    return Action.drag(small.id, large.id) if small and large else None


_LIST_TARGETS = (
    (r"to the top\.", lambda ix, n: 1),
    (r"to the bottom\.", lambda ix, n: n),
    (r"down by one position\.", lambda ix, n: ix + 1),
    (r"up by one position\.", lambda ix, n: ix - 1),
    (r"to the top left\.", lambda ix, n: 1),
    (r"to the top center\.", lambda ix, n: 2),
    (r"to the top right\.", lambda ix, n: 3),
    (r"to the center left\.", lambda ix, n: 4),
    (r"to the center\.", lambda ix, n: 5),
    (r"to the center right\.", lambda ix, n: 6),
    (r"to the bottom left\.", lambda ix, n: 7),
    (r"to the bottom center\.", lambda ix, n: 8),
    (r"to the bottom right\.", lambda ix, n: 9),
    (r"up by one\.", lambda ix, n: ix - 3),
    (r"down by one\.", lambda ix, n: ix + 3),
    (r"left by one\.", lambda ix, n: ix - 1),
    (r"right by one\.", lambda ix, n: ix + 1),
    (r"to the (\d+)(?:st|nd|rd|th) position\.", None),
)


def _sortable_items(nodes: list[Node]) -> list[Node]:
    return [n for n in nodes if n.id is not None and n.box and n.role == "listitem"]


def drag_items(instr, nodes, obs, history):
    """drag-items / drag-items-grid: "Drag NAME to the 3rd position." (the drop ends the task)."""
    if _dragged(history):
        return None
    items = _sortable_items(nodes)
    names = [n.name for n in items]
    m = re.match(r"Drag (.+?) ((?:to|up|down|left|right) .*)$", instr.strip())
    if not m or m.group(1) not in names:
        return None
    ix, where = names.index(m.group(1)) + 1, m.group(2)
    for pat, fn in _LIST_TARGETS:
        pm = re.fullmatch(pat, where)
        if pm:
            to = int(pm.group(1)) if fn is None else fn(ix, len(items))
            if 1 <= to <= len(items) and to != ix:
                return _drop_at(items[ix - 1], items[to - 1])
    return None


def drag_sort_numbers(instr, nodes, obs, history):
    """Selection sort by drags: the smallest number not yet in place goes to its place."""
    items = _sortable_items(nodes)
    try:
        vals = [int(n.name) for n in items]
    except ValueError:
        return None
    want = sorted(vals)
    for i, v in enumerate(vals):
        if v != want[i]:
            j = vals.index(want[i], i)
            return _drop_at(items[j], items[i])
    return submit(nodes)


def highlight_text(instr, nodes, obs, history):
    """highlight-text(-2): select the (n-th) paragraph's text, then Submit."""
    if any(a.kind == "select_text" for _, a in history):
        return submit(nodes)
    paras = find(nodes, role="text", pred=lambda n: bool(n.name))
    m = re.search(r"the (\d)(?:st|nd|rd|th) paragraph", instr)
    k = int(m.group(1)) - 1 if m else 0
    if k >= len(paras) or paras[k].name.endswith("…"):
        return None
    return Action.select_text(paras[k].id, paras[k].name)


def drag_shape_direction(instr, nodes, obs, history):
    """drag-circle / drag-single-shape: drag the one shape 20 px left/right/up/down, Submit."""
    if _dragged(history):
        return submit(nodes)
    m = re.search(r"\b(left|right|up|down)\b", instr)
    svg = _svg(nodes)
    shapes = [n for n in nodes if n.role in _SHAPE_TAGS and n.box]
    if not m or svg is None or not shapes:
        return None
    dx, dy = {"left": (-20, 0), "right": (20, 0), "up": (0, -20), "down": (0, 20)}[m.group(1)]
    cx, cy = _centre(shapes[0])
    x, y = _rel(svg, cx + dx, cy + dy)
    return Action.drag(shapes[0].id, svg.id, x, y)


def _clicked_at(history: list) -> bool:
    return any(a.kind == "click_at" for _, a in history)


def _shapes(nodes: list[Node], role: str) -> list[Node]:
    return [n for n in nodes if n.role == role and n.box]


def _click_then_submit(nodes, history, point: tuple[float, float] | None) -> Action | None:
    """click_at the SVG at viewport ``point`` once, then Submit."""
    if _clicked_at(history):
        return submit(nodes)
    svg = _svg(nodes)
    if svg is None or point is None:
        return None
    return Action.click_at(svg.id, *_rel(svg, *point))


def circle_center(instr, nodes, obs, history):
    circles = _shapes(nodes, "circle")
    return _click_then_submit(nodes, history, _centre(circles[0]) if circles else None)


def find_midpoint(instr, nodes, obs, history):
    circles = _shapes(nodes, "circle")[:2]
    if len(circles) < 2:
        return _click_then_submit(nodes, history, None)
    (ax, ay), (bx, by) = _centre(circles[0]), _centre(circles[1])
    return _click_then_submit(nodes, history, ((ax + bx) / 2, (ay + by) / 2))


def _inside(svg: Node, x: float, y: float, margin: float = 4) -> bool:
    sx, sy, w, h = svg.box or (0, 0, 0, 0)
    return sx + margin <= x <= sx + w - margin and sy + margin <= y <= sy + h - margin


def _ray_point(svg: Node, vx: float, vy: float, ux: float, uy: float) -> tuple[float, float]:
    """The farthest point (up to 40 px) from (vx, vy) along unit (ux, uy) inside the SVG."""
    for dist in (40, 30, 20, 12, 6):
        x, y = vx + ux * dist, vy + uy * dist
        if _inside(svg, x, y):
            return x, y
    return vx + ux * 6, vy + uy * 6


def right_angle(instr, nodes, obs, history):
    """Circles: the first is A, the second the vertex V; click B with angle AVB = 90 degrees."""
    circles, svg = _shapes(nodes, "circle")[:2], _svg(nodes)
    if len(circles) < 2 or svg is None:
        return _click_then_submit(nodes, history, None)
    (ax, ay), (vx, vy) = _centre(circles[0]), _centre(circles[1])
    d = ((ax - vx) ** 2 + (ay - vy) ** 2) ** 0.5 or 1.0
    px, py = -(ay - vy) / d, (ax - vx) / d
    p1, p2 = _ray_point(svg, vx, vy, px, py), _ray_point(svg, vx, vy, -px, -py)
    best = max((p1, p2), key=lambda p: (p[0] - vx) ** 2 + (p[1] - vy) ** 2)
    return _click_then_submit(nodes, history, best)


def bisect_angle(instr, nodes, obs, history):
    """Circles: the first is the vertex V, then A and B; click on the bisector of angle AVB."""
    circles, svg = _shapes(nodes, "circle")[:3], _svg(nodes)
    if len(circles) < 3 or svg is None:
        return _click_then_submit(nodes, history, None)
    (vx, vy), a, b = _centre(circles[0]), _centre(circles[1]), _centre(circles[2])
    ux = uy = 0.0
    for px, py in (a, b):
        d = ((px - vx) ** 2 + (py - vy) ** 2) ** 0.5 or 1.0
        ux, uy = ux + (px - vx) / d, uy + (py - vy) / d
    n = (ux * ux + uy * uy) ** 0.5 or 1.0
    return _click_then_submit(nodes, history, _ray_point(svg, vx, vy, ux / n, uy / n))


def grid_coordinate(instr, nodes, obs, history):
    """Click the grid point (X,Y): the axes are the two lines, the spacing that of the points."""
    m = re.search(r"\((-?\d+),\s*(-?\d+)\)", instr)
    lines, circles, svg = _shapes(nodes, "line"), _shapes(nodes, "circle"), _svg(nodes)
    if not m or len(lines) < 2 or len(circles) < 2 or svg is None:
        return None
    horiz = next((ln for ln in lines if (ln.box or (0, 0, 0, 1))[3] <= 1), None)
    vert = next((ln for ln in lines if (ln.box or (0, 0, 1, 0))[2] <= 1), None)
    if horiz is None or vert is None:
        return None
    ox, oy = _centre(vert)[0], _centre(horiz)[1]
    step = abs(_centre(circles[1])[1] - _centre(circles[0])[1]) or 30
    x, y = ox + int(m.group(1)) * step, oy - int(m.group(2)) * step
    return Action.click_at(svg.id, *_rel(svg, x, y))


def ascending_numbers(instr, nodes, obs, history):
    """Click "1"; the numbers then turn into squares in number order: click the first each time."""
    one = first(nodes, role="text", name="1")
    if one is not None and one.box:
        return Action.click(one.id)
    rects = _shapes(nodes, "rect")
    return Action.click(rects[0].id) if rects else None


_SHAPE_WORDS = {"rectangles": "rect", "circles": "circle", "triangles": "polygon"}


def drag_shapes(instr, nodes, obs, history):
    """Drag every shape of the named kind into the black box (the large rect), then Submit."""
    m = re.search(r"Drag all (\w+) into the black box", instr)
    svg = _svg(nodes)
    if not m or m.group(1) not in _SHAPE_WORDS or svg is None:
        return None
    shapes = [n for n in nodes if n.role in ("rect", "circle", "polygon") and n.box]
    box = max(shapes, key=lambda n: (n.box or (0, 0, 0, 0))[2] * (n.box or (0, 0, 0, 0))[3])
    bx, by, bw, bh = box.box or (0, 0, 0, 0)
    done = {a.element for _, a in history if a.kind == "drag"}
    for n in shapes:
        if n is box or n.role != _SHAPE_WORDS[m.group(1)] or n.id in done:
            continue
        x, y, w, h = n.box or (0, 0, 0, 0)
        if not (bx <= x and x + w <= bx + bw and by <= y and y + h <= by + bh):
            return Action.drag(n.id, box.id)  # onto the box's centre
    return submit(nodes)


def click_pie(instr, nodes, obs, history):
    """Open the pie menu (its "+" spreader), then click the slice's label once it has grown."""
    q = re.search(r'labeled "([^"]+)"', instr)
    if not q:
        return None
    item = first(nodes, role="text", name=q.group(1))
    if item is not None and item.box and min(item.box[2], item.box[3]) >= 4:
        if not any(a.element == item.id for _, a in history):
            return Action.click(item.id)
        sl = nodes[item.index - 1] if item.index else None  # the label's slice
        return Action.click(sl.id) if sl is not None and sl.role == "path" else None
    if any(a.kind in ("click", "click_at") for _, a in history):
        return None  # opening: wait
    plus = first(nodes, role="text", name="+")
    if plus is not None:
        return Action.click(plus.id)
    # its line cut by the budget: the spreader sits on the pie's centre, where the closed
    # slices are piled up
    paths, svg = _shapes(nodes, "path"), _svg(nodes)
    if not paths or svg is None:
        return None
    return Action.click_at(svg.id, *_rel(svg, *_centre(paths[0])))


_SHAPE_BUTTONS = {"circle": "Circle", "rect": "Rectangle", "polygon": "Triangle"}


def identify_shape(instr, nodes, obs, history):
    """The one SVG item: a text is a Letter or a Number, a shape names its kind by its tag."""
    svg = _svg(nodes)
    kids = [n for n in nodes if n.parent is not None and svg is not None and n.parent == svg.index]
    if not kids:
        return None
    k = kids[0]
    if k.role == "text":
        label = "Number" if k.name.isdigit() else "Letter"
    else:
        label = _SHAPE_BUTTONS.get(k.role, "")
    b = first(nodes, role="button", name=label)
    return Action.click(b.id) if b else None


# ui_utils.COLORS with their CSS hex values (what the colour picker's field takes)
_CSS_HEX = {
    "black": "000000",
    "white": "FFFFFF",
    "aqua": "00FFFF",
    "blue": "0000FF",
    "gray": "808080",
    "green": "008000",
    "lime": "00FF00",
    "maroon": "800000",
    "navy": "000080",
    "olive": "808000",
    "purple": "800080",
    "red": "FF0000",
    "silver": "C0C0C0",
    "teal": "008080",
    "yellow": "FFFF00",
    "pink": "FFC0CB",
    "magenta": "FF00FF",
    "gold": "FFD700",
    "orange": "FFA500",
}


def use_colorwheel(instr, nodes, obs, history):
    """use-colorwheel: "Select red with the color picker": its hex value into the picker's field."""
    m = re.search(r"Select (\w+) with the color picker", instr)
    box = first(nodes, role="textbox")
    if not m or m.group(1).lower() not in _CSS_HEX or box is None:
        return None
    want = _CSS_HEX[m.group(1).lower()]
    if box.value.upper() != want:
        return Action.type(box.id, want)
    return submit(nodes)


def draw_line(instr, nodes, obs, history):
    """Draw a horizontal/vertical line through the dot: drag from the dot 40 px along the axis."""
    if _dragged(history):
        return submit(nodes)
    m = re.search(r"Draw a (horizontal|vertical) line", instr)
    dots, svg = _shapes(nodes, "circle"), _svg(nodes)
    if not m or not dots or svg is None:
        return None
    cx, cy = _centre(dots[0])
    sx, sy, w, h = svg.box or (0, 0, 0, 0)
    if m.group(1) == "horizontal":
        tx = cx + 40 if cx + 40 < sx + w - 4 else cx - 40
        return Action.drag(dots[0].id, svg.id, *_rel(svg, tx, cy))
    ty = cy + 40 if cy + 40 < sy + h - 4 else cy - 40
    return Action.drag(dots[0].id, svg.id, *_rel(svg, cx, ty))


_STYLE_KEYS = {"bold": "Control+b", "italics": "Control+i", "underlined": "Control+u"}
# Quill's colour picker lists its default palette in a fixed order: black, then these
_QUILL_COLOURS = ("red", "orange", "yellow", "green", "blue", "purple")


def text_editor(instr, nodes, obs, history):
    """text-editor: select the word (or everything), then a style chord (Control+b/i/u) or the
    colour picker's swatch, then Submit."""
    m = re.search(r"give the text (.+?) the (style|color) (\w+)", instr) or re.search(
        r"(?:give|make) (everything) the (style|color) (\w+)", instr
    )
    if not m:
        return None
    word, kind, what = m.group(1), m.group(2), m.group(3)
    done = [a.kind for _, a in history]
    if "select_text" not in done:
        editor = next((n for n in nodes if n.role == "textbox" and n.value), None)
        if editor is None:
            return None
        return Action.select_text(editor.id, editor.value if word == "everything" else word)
    if kind == "style":
        if "press" not in done and what in _STYLE_KEYS:
            return Action.press(_STYLE_KEYS[what])
        return submit(nodes)
    items = [
        n
        for n in nodes
        if n.role == "generic" and (n.props.get("class") or "").startswith("ql-picker-i")
    ]
    if not items and "click" not in done:
        picker = first(nodes, role="svg")
        return Action.click(picker.id) if picker else None
    if items and what in _QUILL_COLOURS:
        return Action.click(items[1 + _QUILL_COLOURS.index(what)].id)
    return submit(nodes)


def chase_circle(instr, nodes, obs, history):
    """Keep the mouse inside the moving circle: hover it again at every step (the point is taken
    where the circle is when the action runs)."""
    circles = _shapes(nodes, "circle")
    return Action.hover(circles[0].id) if circles else None


def moving_items(instr, nodes, obs, history):
    """Click the moving circles that are inside the SVG (each hit scores, the task ends itself)."""
    svg = _svg(nodes)
    if svg is None:
        return None
    for n in _shapes(nodes, "circle"):
        cx, cy = _centre(n)
        if _inside(svg, cx, cy, margin=12):
            return Action.click(n.id)
    return None


def stock_market(instr, nodes, obs, history):
    """Buy when the shown price is at or below the instruction's threshold (else wait)."""
    m = re.search(r"less than \$(\d+(?:\.\d+)?)", instr)
    price = next((n for n in nodes if n.role == "text" and n.name.startswith("$")), None)
    if not m or price is None:
        return None
    try:
        now = float(price.name[1:])
    except ValueError:
        return None
    if now > float(m.group(1)):
        return None
    b = first(nodes, role="button", name="Buy")
    return Action.click(b.id) if b else None
