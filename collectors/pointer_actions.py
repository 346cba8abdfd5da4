"""Pointer and selection actions: hover, click_at, drag, select_text (Playwright calls).

Used by ``collectors.env.WebEnv`` next to ``collectors.page_actions`` (same conventions: the
element is found by our id in the page's main world by a fixed script, no code string is ever
built from an action; a failure raises, and the environment reports it as the next
observation's ``Error:`` line).

* ``hover(id)``: ``page.mouse.move`` to an uncovered point of the element (``locator.hover``
  when none is in view); the mouse stays there.
* ``click_at(id, x, y)``: ``page.mouse.click`` at ``(x, y)`` CSS pixels from the top-left of the
  element's box (``getBoundingClientRect``, after scrolling it into view when it is outside).
* ``drag(id, target[, x, y])``: press the mouse on an uncovered point of the element, move a few
  pixels (drag libraries such as jQuery UI start a drag only after the pointer moved), move in
  ``DRAG_STEPS`` steps to the target's centre (or ``(x, y)`` in its box), release.  Trusted
  mouse events, as a person's drag: what jQuery UI draggable/sortable and the MiniWoB tasks
  listen to.
* ``select_text(id, "s")``: the document selection set to the first occurrence of ``s`` in
  the element's text (a DOM ``Range`` over its text nodes; in an input or textarea its
  ``setSelectionRange``), then a ``mouseup`` on the element as a mouse selection ends.
  Whitespace runs match any whitespace run of the page text.
"""

from __future__ import annotations

from typing import Any

from collectors.observation import ATTR
from collectors.page_actions import CLICK_POINT_JS, VISIBLE_POINT_JS
from core.spaces import Action

DRAG_STEPS = 8
DRAG_START_PX = 4

# The element's box in viewport coordinates ({x, y, w, h}); scrolled into view when outside.
BOX_JS = r"""
(el) => {
  let r = el.getBoundingClientRect();
  if (r.bottom < 0 || r.right < 0 || r.top > innerHeight || r.left > innerWidth) {
    el.scrollIntoView({block: 'center', inline: 'center'});
    r = el.getBoundingClientRect();
  }
  return {x: r.left, y: r.top, w: r.width, h: r.height};
}
"""

# Select the first occurrence of text ``s`` in the element (args: [element, s]); 'ok' or why not.
SELECT_TEXT_JS = r"""
([el, s]) => {
  const esc = (t) => t.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  const pat = new RegExp(s.trim().split(/\s+/).map(esc).join('\\s+'));
  if (el.tagName === 'INPUT' || el.tagName === 'TEXTAREA') {
    const m = pat.exec(el.value);
    if (!m) return 'the text is not in the field';
    el.focus(); el.setSelectionRange(m.index, m.index + m[0].length);
  } else {
    const nodes = [], starts = [];
    let all = '';
    const walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
    for (let n = walker.nextNode(); n; n = walker.nextNode()) { nodes.push(n); starts.push(all.length); all += n.data; }
    const m = pat.exec(all);
    if (!m) return 'the text is not in the element';
    // the text node holding offset ``off`` (an end offset may sit at a node's end)
    const at = (off, end) => {
      for (let i = 0; i < nodes.length; i++) {
        const lo = starts[i], hi = starts[i] + nodes[i].data.length;
        if (end ? (off > lo && off <= hi) : (off >= lo && off < hi)) return [nodes[i], off - lo];
      }
      return [nodes[nodes.length - 1], nodes[nodes.length - 1].data.length];
    };
    const [sn, so] = at(m.index, false), [en, eo] = at(m.index + m[0].length, true);
    const range = document.createRange();
    range.setStart(sn, so); range.setEnd(en, eo);
    const sel = window.getSelection(); sel.removeAllRanges(); sel.addRange(range);
  }
  const r = el.getBoundingClientRect();
  el.dispatchEvent(new MouseEvent('mouseup', {bubbles: true, clientX: r.left + 1, clientY: r.top + 1}));
  return 'ok';
}
"""


def _one(fn: str, with_arg: bool = False) -> str:
    """``fn`` applied to the one element carrying our id (null when missing or not unique)."""
    find = "const els = document.querySelectorAll('[" + ATTR + "=\"' + (id | 0) + '\"]');"
    call = "(" + fn.strip() + ")(" + ("[els[0], arg]" if with_arg else "els[0]") + ")"
    head = "([id, arg]) => {" if with_arg else "(id) => {"
    return head + find + " if (els.length !== 1) return null; return " + call + "; }"


BOX_BY_ID_JS = _one(BOX_JS)
POINT_BY_ID_JS = _one(CLICK_POINT_JS)
VISIBLE_BY_ID_JS = _one(VISIBLE_POINT_JS)
SELECT_TEXT_BY_ID_JS = _one(SELECT_TEXT_JS, with_arg=True)


class PointerError(RuntimeError):
    """The action could not run (the message is the observation's error text)."""


async def _box(page: Any, el: int) -> dict:
    box = await page.evaluate(BOX_BY_ID_JS, el)
    if box is None:
        raise PointerError(f"element [{el}] is not on the page")
    if not box["w"] or not box["h"]:
        raise PointerError(f"element [{el}] has no box (not displayed)")
    return box


async def _grab_point(page: Any, el: int) -> tuple[float, float]:
    """An uncovered point of element ``el`` in viewport coordinates (else its box centre)."""
    p = await page.evaluate(POINT_BY_ID_JS, el)
    if p is not None:
        return p["x"], p["y"]
    box = await _box(page, el)
    rel = await page.evaluate(VISIBLE_BY_ID_JS, el)
    if isinstance(rel, dict):
        return box["x"] + rel["x"], box["y"] + rel["y"]
    return box["x"] + box["w"] / 2, box["y"] + box["h"] / 2


async def hover_element(page: Any, loc: Any, a: Action, t: int) -> None:
    p = await page.evaluate(POINT_BY_ID_JS, a.element)
    if p is None:
        await loc.hover(timeout=t)
        return
    await page.mouse.move(p["x"], p["y"])


async def click_at(page: Any, a: Action) -> None:
    box = await _box(page, a.element)
    await page.mouse.click(box["x"] + a.x, box["y"] + a.y)


async def drag(page: Any, a: Action) -> None:
    sx, sy = await _grab_point(page, a.element)
    box = await _box(page, a.target)
    if a.x is None:
        tx, ty = box["x"] + box["w"] / 2, box["y"] + box["h"] / 2
    else:
        tx, ty = box["x"] + a.x, box["y"] + a.y
    m = page.mouse
    await m.move(sx, sy)
    await m.down()
    await m.move(sx + DRAG_START_PX, sy + DRAG_START_PX, steps=2)
    await m.move(tx, ty, steps=DRAG_STEPS)
    await m.move(tx, ty)  # a last move at the drop point (sortables re-order on moves)
    await m.up()


async def select_text(page: Any, a: Action) -> None:
    r = await page.evaluate(SELECT_TEXT_BY_ID_JS, [a.element, a.text])
    if r is None:
        raise PointerError(f"element [{a.element}] is not on the page")
    if r != "ok":
        raise PointerError(f"select_text on [{a.element}] failed: {r}")


async def perform_pointer(page: Any, loc: Any, a: Action, t: int) -> None:
    """Run one of hover / click_at / drag / select_text (raises on failure)."""
    if a.kind == "hover":
        await hover_element(page, loc, a, t)
    elif a.kind == "click_at":
        await click_at(page, a)
    elif a.kind == "drag":
        await drag(page, a)
    else:
        await select_text(page, a)
