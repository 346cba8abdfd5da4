"""Observation builder: a DOM walk in the page, our own element ids, a text tree.

One ``page.evaluate`` per observation (``OBSERVE_JS``, the function in
``collectors/observation.js``) does everything: it walks the visible DOM under
``<body>`` (skipping MiniWoB's ``#reward-display``, the ``START`` cover, the
click canvas and ``#query``, which is the instruction), decides a
role/name/state for each shown node, assigns element ids, and returns the
flat node list plus the MiniWoB reward globals and the focused element.

Element ids
    Ids are written on the DOM node as ``data-dw-id`` and found again with
    ``page.locator('[data-dw-id="7"]')`` (see ``locator_for``).  At reset all
    ids are cleared and assigned 1, 2, ... in document order.  Later, a node
    that already carries an id keeps it; a node appearing later takes the next
    free id (``next_id`` is tracked in Python, so it survives navigations); a
    copied node (``cloneNode`` copies attributes) that repeats an id already
    seen in this walk gets a fresh one.  So the same page state with the same
    id history always gives the same text.  Playwright refs never appear.

Text form (one line per shown node, two spaces per nesting level)::

    [3] button "Submit"
    [4] checkbox "Red" checked
    [5] textbox "Username" value="bob"
    [6] combobox value="B"
      option "A"
      option "B" selected
    text "loose text between elements (no id)"
    [7] text "lorem ipsum" clickable

    ``"..."`` strings are JSON string literals (as in action text).  States:
    ``checked``, ``selected``, ``expanded``/``collapsed``, ``disabled``,
    ``clickable`` (a generic node with a click handler or a pointer cursor),
    ``haspopup`` (opens a submenu),
    ``value="..."``, ``type="password"`` (non-text inputs), ``multiline`` (a
    textarea), ``box="x,y,w,h"`` (see Boxes); a nameless ``generic`` node (an icon) shows
    its DOM ``id=`` and ``class=`` as the only hint of what it is.  Lines without an
    id are plain text or ``<select>`` options (use ``select(id, "B")``).

Boxes (for ``click_at`` / ``drag``, ``core.spaces``)
    Only three kinds of line carry ``box="x,y,w,h"``: an ``svg`` or ``canvas`` element, each
    shape inside an SVG, and a draggable element (a jQuery UI draggable, an item of a jQuery UI
    sortable list, an element with ``draggable="true"`` or a d3 drag behaviour; such a line is
    actionable).  Outside an SVG, a box on a line that is not ``svg``/``canvas`` therefore means
    *draggable*. The box is the element's ``getBoundingClientRect`` in viewport CSS pixels, each
    number rounded to an integer. The shapes of an SVG are its child lines (groups flattened,
    ``defs``/``style``/... skipped, and so are shapes under 2x2 px: a chart's dots, a menu not
    yet opened; an SVG of at most 24x24 px is an icon and lists no shapes), one per shape, the
    role being the SVG tag (``circle``, ``rect``, ``line``, ``polygon``, ``text`` ...; a
    ``text`` shape is named by its text), all actionable::

        [4] svg box="0,50,160,160"
          [5] circle box="22,80,20,20"
          [6] text "7" box="31,84,6,12"

    Positions in actions are relative to a box's top-left, so ``click_at(4, 32, 40)`` on the
    svg above clicks the middle of circle [5] (viewport 32+0, 40+50 = its centre 32, 90).

Truncation (``truncate_lines``), for a budget in tokens (default: UTF-8 bytes,
the byte-level tokenizer's count) of the tree text:
    0. every string (name or value) is first capped at ``MAX_STRING`` (160) bytes;
    1. if too long, strings of *non-actionable* lines (text, headings, cells ...)
       are shortened to ``TEXT_STRING`` (48) bytes;
    2. then non-actionable leaf lines are dropped, last line first;
    3. then the strings of the remaining lines are shortened to 64, 32 and
       finally 16 bytes (a cut string ends with ``…``);
    4. then lines are dropped from the end and ``... (N more lines)`` closes the tree.
    Actionable lines (those the action space can act on) are therefore the
    last to go, and a container is never dropped before its children.  A ``box`` value is
    never shortened (steps 0-3 leave it whole; SVG shapes and draggable elements are
    actionable, so only step 4 drops them, whole lines from the end).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from core.spaces import Observation

ATTR = "data-dw-id"
MAX_STRING = 160
TEXT_STRING = 48
DEFAULT_BUDGET = 512
UNCUT_PROPS = frozenset({"box"})  # never shortened: a cut box would be a wrong position

# Roles the action space can act on directly
ACTIONABLE_ROLES = frozenset(
    {
        "button",
        "link",
        "textbox",
        "searchbox",
        "checkbox",
        "radio",
        "slider",
        "spinbutton",
        "combobox",
        "listbox",
        "option",
        "tab",
        "menuitem",
        "menuitemcheckbox",
        "menuitemradio",
        "treeitem",
        "switch",
        "gridcell",
        "label",
    }
)


def locator_for(page: Any, element_id: int) -> Any:
    """The Playwright locator of our element id (no Playwright ref involved)."""
    return page.locator(f'[{ATTR}="{int(element_id)}"]')


@dataclass
class Line:
    depth: int
    id: int | None
    role: str
    name: str = ""
    props: list = field(default_factory=list)  # [(key, value|None)]
    actionable: bool = False

    def text(self, limit: int | None = None, text_limit: int | None = None) -> str:
        if text_limit is not None and not self.actionable:
            limit = text_limit if limit is None else min(limit, text_limit)
        parts = ["  " * self.depth]
        if self.id is not None:
            parts.append(f"[{self.id}] ")
        parts.append(self.role)
        if self.name:
            parts.append(" " + _jstr(_cut(self.name, limit)))
        for k, v in self.props:
            if v is not None and k in UNCUT_PROPS:
                parts.append(f" {k}={_jstr(str(v))}")
            else:
                parts.append(f" {k}" if v is None else f" {k}={_jstr(_cut(str(v), limit))}")
        return "".join(parts)


def _jstr(s: str) -> str:
    return json.dumps(s, ensure_ascii=False)


def _cut(s: str, limit: int | None) -> str:
    """Cut ``s`` to at most ``limit`` UTF-8 bytes (ending with …), on a character boundary."""
    if limit is None:
        return s
    b = s.encode()
    if len(b) <= limit:
        return s
    ell = "…"
    keep = max(0, limit - len(ell.encode()))
    return b[:keep].decode("utf-8", "ignore") + ell


def byte_len(s: str) -> int:
    return len(s.encode())


def render_lines(
    lines: list[Line], limit: int | None = MAX_STRING, text_limit: int | None = None
) -> str:
    return "\n".join(ln.text(limit, text_limit) for ln in lines)


def truncate_lines(
    lines: list[Line], budget: int | None = DEFAULT_BUDGET, measure: Callable[[str], int] = byte_len
) -> tuple[str, dict]:
    """Apply the documented truncation rule; returns ``(tree_text, info)``.

    ``info``: ``dropped_text`` (non-actionable lines dropped), ``shortened_to``
    (byte cap used in step 2, or None), ``dropped_tail`` (lines cut in step 3),
    ``truncated`` (bool).
    """
    info = {
        "shortened_text": False,
        "dropped_text": 0,
        "shortened_to": None,
        "dropped_tail": 0,
        "truncated": False,
    }
    text = render_lines(lines, MAX_STRING)
    if budget is None or measure(text) <= budget:
        return text, info
    info["truncated"] = True
    # 1. shorten the strings of non-actionable lines
    info["shortened_text"] = True
    text = render_lines(lines, MAX_STRING, TEXT_STRING)
    if measure(text) <= budget:
        return text, info
    lines = list(lines)
    # 2. drop non-actionable leaves, last first (re-scan: dropping a leaf can expose its parent)
    sizes = [measure(ln.text(MAX_STRING, TEXT_STRING)) + 1 for ln in lines]
    total = sum(sizes) - 1
    changed = True
    while total > budget and changed:
        changed = False
        for i in range(len(lines) - 1, -1, -1):
            ln = lines[i]
            if ln.actionable:
                continue
            is_leaf = i + 1 >= len(lines) or lines[i + 1].depth <= ln.depth
            if not is_leaf:
                continue
            total -= sizes[i]
            del lines[i], sizes[i]
            info["dropped_text"] += 1
            changed = True
            if total <= budget:
                break
    text = render_lines(lines, MAX_STRING, TEXT_STRING)
    if measure(text) <= budget:
        return text, info
    # 3. shorten every string
    for limit in (64, 32, 16):
        info["shortened_to"] = limit
        text = render_lines(lines, limit, TEXT_STRING)
        if measure(text) <= budget:
            return text, info
    # 4. cut the tail, with a marker that says how much is missing
    rendered = [ln.text(16) for ln in lines]

    def cut(n: int) -> str:
        return "\n".join(rendered[:n] + [f"... ({len(rendered) - n} more lines)"])

    # the most lines that fit with the marker: a binary search (one line less is always shorter,
    # in bytes and in tokens), the same answer as trying n = len - 1, len - 2, ... in turn
    lo, hi = 0, len(rendered) - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if measure(cut(mid)) <= budget:
            lo = mid
        else:
            hi = mid - 1
    n = lo
    text = cut(n)
    info["dropped_tail"] = len(rendered) - n
    if measure(text) > budget:  # even the marker does not fit
        text = ""
    return text, info


# --- the page side -------------------------------------------------------------

# One function, evaluated once per observation: ``collectors/observation.js`` (package data).  It
# must stay free of anything derived from an action: actions are Playwright calls, never code strings.
OBSERVE_JS = resources.files("collectors").joinpath("observation.js").read_text(encoding="utf-8")


# Settling: after an action the observation waits until the page has rendered a frame and its DOM
# has not changed for ``settleMs`` (capped at ``settleMaxMs``), so it shows the action's settled
# effect (handlers deferred by setTimeout/rAF, a jQuery animation: its 13 ms ticks keep the DOM
# busy until it ends) instead of whatever a race with those timers gives.  MiniWoB's own timer
# display and our id attributes do not count as changes.  Sets ``args.settled`` (ms waited).  The
# next check is due when the quiet window would end or at the cap, whichever comes first, so a page
# that never stops changing is observed at the cap, not up to a quiet window after it.
SETTLE_JS = r"""
(args) => new Promise((resolve) => {
  const quiet = +args.settleMs || 0, cap = Math.max(quiet, +args.settleMaxMs || 0);
  const t0 = performance.now();
  let last = t0, framed = false, done = false;
  const skip = document.getElementById('reward-display');
  const mo = new MutationObserver((recs) => {
    for (const r of recs) {
      if (r.type === 'attributes' && r.attributeName === 'data-dw-id') continue;
      if (skip && skip.contains(r.target)) continue;
      last = performance.now(); return;
    }
  });
  mo.observe(document, {subtree: true, childList: true, attributes: true, characterData: true});
  requestAnimationFrame(() => { framed = true; });
  const check = () => {
    if (done) return;
    const now = performance.now();
    if (now - t0 >= cap || (framed && now - last >= quiet)) {
      done = true; mo.disconnect(); args.settled = Math.round(now - t0); resolve();
    } else setTimeout(check, framed ? Math.max(1, Math.min(quiet - (now - last), cap - (now - t0))) : 4);
  };
  setTimeout(check, 0);
})
"""
# Observe after settling, in the same evaluate.
SETTLED_OBSERVE_JS = (
    "async (args) => { await ("
    + SETTLE_JS.strip()
    + ")(args); return ("
    + OBSERVE_JS.strip()
    + ")(args); }"
)


@dataclass
class PageState:
    """What one evaluate returns besides the observation."""

    done: bool
    raw_reward: float
    reward: float
    reason: str | None
    ready: bool
    url: str
    all_ids: set
    lines: list
    trunc: dict
    settled_ms: float | None = None  # how long the page took to settle after the action


def lines_from_raw(raw: list) -> list[Line]:
    return [Line(int(d), i, r, n, [(k, v) for k, v in p], bool(a)) for d, i, r, n, p, a in raw]


class ObservationBuilder:
    """Builds observations for one page; owns the id counter of that page."""

    def __init__(
        self,
        budget: int | None = DEFAULT_BUDGET,
        measure: Callable[[str], int] = byte_len,
        strip_origin: str = "",
        prune: Callable[[list[Line]], list[Line]] | None = None,
    ):
        self.budget = budget
        self.measure = measure
        # lines -> the lines shown, before truncation (app pages: collectors.webapps.prune)
        self.prune = prune
        self.strip_origin = strip_origin.rstrip("/")
        self.next_id = 1

    def url_form(self, url: str) -> str:
        """Page URL without the task server's origin (stable across ports) or our seed parameter."""
        if self.strip_origin and url.startswith(self.strip_origin):
            url = url[len(self.strip_origin) :] or "/"
        if "dw_seed=" in url:
            base, _, q = url.partition("?")
            rest, frag = (q.split("#", 1) + [""])[:2] if "#" in q else (q, "")
            keep = "&".join(p for p in rest.split("&") if p and not p.startswith("dw_seed="))
            url = base + (f"?{keep}" if keep else "") + (f"#{frag}" if frag else "")
        return url

    def build(self, raw: dict, error: str = "") -> tuple[Observation, PageState]:
        lines = lines_from_raw(raw["lines"])
        self.next_id = max(self.next_id, int(raw["next"]))
        shown = self.prune(lines) if self.prune is not None else lines
        tree, trunc = truncate_lines(shown, self.budget, self.measure)
        if self.prune is not None:
            trunc["pruned"] = len(lines) - len(shown)
        all_ids = {ln.id for ln in lines if ln.id is not None}
        from core.spaces import ids_in_tree

        obs = Observation(
            instruction=str(raw.get("instruction") or ""),
            url=self.url_form(str(raw.get("url") or "")),
            tree=tree,
            focused=raw.get("focused"),
            last_action_error=error,
            next_id=self.next_id,
            element_ids=ids_in_tree(tree),
        )
        st = PageState(
            done=bool(raw.get("done")),
            raw_reward=float(raw.get("raw_reward") or 0.0),
            reward=float(raw.get("reward") or 0.0),
            reason=raw.get("reason"),
            ready=bool(raw.get("ready", True)),
            url=str(raw.get("url") or ""),
            all_ids=all_ids,
            lines=lines,
            trunc=trunc,
            settled_ms=raw.get("settled_ms"),
        )
        return obs, st

    async def observe(
        self,
        page: Any,
        reset: bool = False,
        error: str = "",
        settle: tuple[float, float] | None = None,
    ) -> tuple[Observation, PageState]:
        """One evaluate; with ``settle=(quiet_ms, max_ms)`` it first waits for the page to settle
        (``SETTLE_JS``)."""
        if reset:
            self.next_id = 1
        args: dict = {"reset": bool(reset), "nextId": self.next_id}
        script = OBSERVE_JS
        if settle is not None:
            script = SETTLED_OBSERVE_JS
            args.update(settleMs=float(settle[0]), settleMaxMs=float(settle[1]))
        raw = await page.evaluate(script, args)
        return self.build(json.loads(raw), error)
