"""Actions on one element of the page: Playwright calls, the element found by our id.

Used by ``collectors.env.WebEnv`` (which documents the action semantics).  The element is found
by our id (``data-dw-id``) in the page's main world, in the same evaluate that computes the click
point or prepares the field (``_by_id``: one round trip, where a Playwright locator costs four);
when that fails the Playwright locator path runs, which waits and reports why.  The scripts are
fixed functions: no code string is ever built from an action.

``is_crash`` tells a crashed page or browser from an action that failed; ``short_error`` is the
one-line error text an action failure shows in the next observation.
"""

from __future__ import annotations

from typing import Any

from collectors.observation import ATTR
from core.spaces import Action

# Fixed helpers evaluated on an element (never built from action text).
# A point of the element that is not covered by another one (None: let Playwright decide).
VISIBLE_POINT_JS = r"""
(el) => {
  const r = el.getBoundingClientRect();
  if (!r.width || !r.height) return null;
  const hit = (x, y) => { const h = document.elementFromPoint(x, y); return !!h && (h === el || el.contains(h)); };
  const cx = r.left + r.width / 2, cy = r.top + r.height / 2;
  if (cx < 0 || cy < 0 || cx >= innerWidth || cy >= innerHeight) return null;
  if (hit(cx, cy)) return 'center';
  for (const fy of [0.5, 0.25, 0.75, 0.1, 0.9]) for (const fx of [0.5, 0.25, 0.75, 0.1, 0.9]) {
    const x = r.left + r.width * fx, y = r.top + r.height * fy;
    if (x >= 0 && y >= 0 && x < innerWidth && y < innerHeight && hit(x, y)) return {x: x - r.left, y: y - r.top};
  }
  return null;
}
"""
# The same, as viewport coordinates for ``page.mouse.click`` (one evaluate, then
# the trusted input events: ~14 ms instead of ~45 ms for ``locator.click``,
# whose actionability checks wait for animation frames).  ``null`` (not in the
# viewport, covered, zero-sized, disabled, or a link that may navigate): the
# caller falls back to ``locator.click``, which scrolls, waits and reports.
CLICK_POINT_JS = r"""
(el) => {
  if (el.disabled) return null;
  const a = el.closest('a[href]');
  if (a) { const h = a.getAttribute('href') || ''; if (h && h !== '#' && !h.startsWith('#') && !/^javascript:/i.test(h)) return null; }
  const r = el.getBoundingClientRect();
  if (!r.width || !r.height) return null;
  const hit = (x, y) => { const h = document.elementFromPoint(x, y); return !!h && (h === el || el.contains(h)); };
  for (const fy of [0.5, 0.25, 0.75, 0.1, 0.9]) for (const fx of [0.5, 0.25, 0.75, 0.1, 0.9]) {
    const x = r.left + r.width * fx, y = r.top + r.height * fy;
    if (x >= 0 && y >= 0 && x < innerWidth && y < innerHeight && hit(x, y)) return {x, y};
  }
  return null;
}
"""
# Prepare ``fill``: focus a text-like field and select its content, as Playwright's own fill does
# before it inserts the text; 'ok', or null when the element needs Playwright's full path (a
# date/colour/range input, not yet visible or editable: that path waits and reports).
FILL_PREP_JS = r"""
(el) => {
  const TYPE_INTO = {'': 1, email: 1, number: 1, password: 1, search: 1, tel: 1, text: 1, url: 1};
  if (el.disabled || el.readOnly || el.getAttribute('aria-disabled') === 'true') return null;
  const r = el.getBoundingClientRect();
  if (!r.width || !r.height || getComputedStyle(el).visibility !== 'visible') return null;
  if (el.tagName === 'INPUT') {
    if (!TYPE_INTO[(el.type || '').toLowerCase()]) return null;
    el.select(); el.focus();
  } else if (el.tagName === 'TEXTAREA') {
    el.selectionStart = 0; el.selectionEnd = el.value.length; el.focus();
  } else if (el.isContentEditable) {
    const range = document.createRange(); range.selectNodeContents(el);
    const sel = window.getSelection(); sel.removeAllRanges(); sel.addRange(range); el.focus();
  } else return null;
  return document.activeElement === el ? 'ok' : null;
}
"""


def _by_id(fn: str) -> str:
    """``fn(element)`` applied to the one element carrying our id ``id`` (a number argument), in the
    page's main world: one round trip, where a Playwright locator costs four.  null when the id is
    missing or not unique (the caller then takes the locator path, which reports why)."""
    return (
        "(id) => { const els = document.querySelectorAll('[" + ATTR + "=\"' + (id | 0) + '\"]');"
        " if (els.length !== 1) return null; return (" + fn.strip() + ")(els[0]); }"
    )


SELECTED_JS = "(el) => (el.tagName === 'SELECT' && el.multiple) ? Array.from(el.selectedOptions).map(o => o.label) : null"

CLICK_BY_ID_JS = _by_id(CLICK_POINT_JS)
FILL_BY_ID_JS = _by_id(FILL_PREP_JS)

_CRASH_MARKERS = (
    "crash",
    "target closed",
    "has been closed",
    "browser has been closed",
    "target page, context or browser has been closed",
    "connection closed",
)


def is_crash(exc: BaseException) -> bool:
    msg = str(exc).lower()
    return any(m in msg for m in _CRASH_MARKERS)


def short_error(exc: BaseException) -> str:
    msg = str(exc).strip().splitlines()
    first = msg[0] if msg else type(exc).__name__
    return first[:200]


async def click_element(page: Any, loc: Any, a: Action, t: int) -> None:
    """Click ``a.element`` at an uncovered point (``page.mouse.click``), else ``locator.click``."""
    # click where the element is not covered (MiniWoB places elements at random)
    point = await page.evaluate(CLICK_BY_ID_JS, a.element)
    if point is not None:
        await page.mouse.click(point["x"], point["y"])
        return
    point = await loc.evaluate(VISIBLE_POINT_JS, timeout=t)
    pos = {"x": point["x"], "y": point["y"]} if isinstance(point, dict) else None
    await loc.click(timeout=t, **({"position": pos} if pos else {}))


async def fill_element(page: Any, loc: Any, a: Action, t: int) -> None:
    """Replace the text of field ``a.element`` with ``a.text``."""
    # Playwright's fill in two calls: focus + select (by id), then trusted text input
    if await page.evaluate(FILL_BY_ID_JS, a.element) == "ok":
        if a.text:
            await page.keyboard.insert_text(a.text)
        else:
            await page.keyboard.press("Delete")
    else:
        await loc.fill(a.text, timeout=t)


async def select_option(loc: Any, a: Action, t: int) -> None:
    """Select option ``a.text`` (by label, then by value) of ``<select>`` ``a.element``."""
    # a multi-select list: select toggles one option and keeps the others
    current = await loc.evaluate(SELECTED_JS, timeout=t)
    if current is not None:
        want = [x for x in current if x != a.text] if a.text in current else current + [a.text]
        await loc.select_option(label=want, timeout=t)
        return
    try:
        await loc.select_option(label=a.text, timeout=t)
    except Exception as e:  # noqa: BLE001
        if is_crash(e):
            raise
        await loc.select_option(value=a.text, timeout=t)
