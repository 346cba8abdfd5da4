"""Observation builder: a DOM walk in the page, our own element ids, a text tree.

One ``page.evaluate`` per observation does everything: it walks the visible
DOM under ``<body>`` (skipping MiniWoB's ``#reward-display``, the ``START``
cover, the click canvas and ``#query``, which is the instruction), decides a
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
    textarea); a nameless ``generic`` node (an icon) shows its DOM ``id=`` and
    ``class=`` as the only hint of what it is.  Lines without an
    id are plain text or ``<select>`` options (use ``select(id, "B")``).

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
    last to go, and a container is never dropped before its children.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from core.spaces import Observation

ATTR = "data-dw-id"
MAX_STRING = 160
TEXT_STRING = 48
DEFAULT_BUDGET = 512

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
    n = len(rendered)
    while n > 0:
        n -= 1
        marker = f"... ({len(rendered) - n} more lines)"
        text = "\n".join(rendered[:n] + [marker])
        if measure(text) <= budget:
            break
    info["dropped_tail"] = len(rendered) - n
    if measure(text) > budget:  # even the marker does not fit
        text = ""
    return text, info


# --- the page side -------------------------------------------------------------

# One function, evaluated once per observation.  It must stay free of anything
# derived from an action: actions are Playwright calls, never code strings.
OBSERVE_JS = r"""
(args) => {
  const ATTR = 'data-dw-id';
  const SKIP_IDS = {'reward-display':1, 'sync-task-cover':1, 'click-canvas':1, 'query':1};
  const SKIP_TAGS = {SCRIPT:1, STYLE:1, NOSCRIPT:1, TEMPLATE:1, HEAD:1, META:1, LINK:1, TITLE:1, BR:1, HR:1, IFRAME:0};
  const INTERACTIVE = {button:1, link:1, textbox:1, searchbox:1, checkbox:1, radio:1, slider:1,
    spinbutton:1, combobox:1, listbox:1, option:1, tab:1, menuitem:1, menuitemcheckbox:1,
    menuitemradio:1, treeitem:1, 'switch':1, gridcell:1};
  const LEAF = {textbox:1, searchbox:1, checkbox:1, radio:1, slider:1, spinbutton:1, img:1, canvas:1, svg:1, 'switch':1};
  const NAME_FROM_CONTENT = {button:1, link:1, tab:1, menuitem:1, menuitemcheckbox:1, menuitemradio:1,
    option:1, treeitem:1, heading:1, cell:1, columnheader:1, gridcell:1, label:1, listitem:1,
    text:1, tooltip:1, status:1};
  const KEEP_CONTAINER = {dialog:1, alertdialog:1, tabpanel:1, tablist:1, menu:1, menubar:1, tree:1,
    group:1, row:1, form:0, radiogroup:1, listbox:1, grid:1, region:0, tooltip:1, alert:1, status:0};
  const TEXT_TYPES = {text:1, search:1, email:1, url:1, tel:1, '':1};
  const norm = (s) => (s || '').replace(/\s+/g, ' ').trim();
  const jq = (window.jQuery && window.jQuery._data) ? window.jQuery : null;

  function hasHandler(el) {
    if (el.onclick || el.onmousedown || el.onmouseup || el.ondblclick) return true;
    if (el.__onclick || el.__onmousedown || el.__onmouseup) return true;            // d3 v3
    if (el.__on) { for (const o of el.__on) if (/^(click|mouse(down|up)|dblclick)/.test(o.type)) return true; } // d3 v4
    if (jq) { const ev = jq._data(el, 'events'); if (ev && (ev.click || ev.mousedown || ev.mouseup || ev.dblclick)) return true; }
    return false;
  }

  function roleOf(el, tag) {
    const r = el.getAttribute('role');
    if (r) {
      const rr = r.split(' ')[0].toLowerCase();
      if (rr !== 'presentation' && rr !== 'none') return rr;   // those mean: the tag's own role
    }
    switch (tag) {
      case 'A': return 'link';
      case 'BUTTON': return 'button';
      case 'INPUT': {
        const t = (el.getAttribute('type') || 'text').toLowerCase();
        if (t === 'button' || t === 'submit' || t === 'reset' || t === 'image') return 'button';
        if (t === 'checkbox') return 'checkbox';
        if (t === 'radio') return 'radio';
        if (t === 'range') return 'slider';
        if (t === 'hidden') return null;
        if (t === 'number') return 'spinbutton';
        return 'textbox';
      }
      case 'TEXTAREA': return 'textbox';
      case 'SELECT': return (el.multiple || el.size > 1) ? 'listbox' : 'combobox';
      case 'OPTION': return 'option';
      case 'H1': case 'H2': case 'H3': case 'H4': case 'H5': case 'H6': return 'heading';
      case 'IMG': return 'img';
      case 'LABEL': return 'label';
      case 'LI': return 'listitem';
      case 'TD': return 'cell';
      case 'TH': return 'columnheader';
      case 'TR': return 'row';
      case 'CANVAS': return 'canvas';
      case 'SVG': return 'svg';
    }
    if (el.isContentEditable && el.hasAttribute('contenteditable')) return 'textbox';
    return '';
  }

  function controlName(el) {
    let n = el.getAttribute('aria-label');
    if (n) return norm(n);
    if (el.labels && el.labels.length) {
      const parts = [];
      for (const l of el.labels) parts.push(norm(l.innerText));
      n = norm(parts.join(' '));
      if (n) return n;
    }
    return norm(el.getAttribute('placeholder') || el.getAttribute('title') || '');
  }

  function textNode(s) { return {el: null, role: 'text', name: s, props: [], kids: [], act: false}; }
  const allText = (kids) => kids.length > 0 && kids.every(k => k.role === 'text' && !k.act && !k.kids.length);

  function walk(el, parentCursor) {
    const tag = el.tagName.toUpperCase();
    if (SKIP_TAGS[tag]) return [];
    if (el.id && SKIP_IDS[el.id]) return [];
    const cs = getComputedStyle(el);
    if (cs.display === 'none') return [];
    const hidden = cs.visibility === 'hidden' || cs.visibility === 'collapse';
    if (cs.overflow === 'hidden' && cs.position === 'absolute') {
      const r = el.getBoundingClientRect();
      if (r.width <= 1 || r.height <= 1) return [];   // visually-hidden helpers (jQuery UI live regions)
    }
    let role = roleOf(el, tag);
    if (role === null) return [];
    const props = [];
    let name = '';
    let kids = [];
    if (tag === 'SELECT') {
      for (const o of el.options) {
        const on = {el: null, role: 'option', name: norm(o.text), props: o.selected ? [['selected', null]] : [], kids: [], act: false};
        kids.push(on);
      }
      const sel = el.options[el.selectedIndex];
      if (sel) props.push(['value', norm(sel.text)]);
      name = controlName(el);
    } else if (LEAF[role]) {
      if (tag === 'INPUT' || tag === 'TEXTAREA') {
        name = controlName(el);
        const t = (el.getAttribute('type') || 'text').toLowerCase();
        if (role === 'checkbox' || role === 'radio') { if (el.checked) props.push(['checked', null]); }
        else if (el.value) props.push(['value', el.value]);
        if (role === 'textbox' && tag === 'INPUT' && !TEXT_TYPES[t]) props.push(['type', t]);
        if (tag === 'TEXTAREA') props.push(['multiline', null]);
        if (role === 'slider') { props.push(['min', el.min || '0']); props.push(['max', el.max || '100']); }
      } else if (role === 'img') {
        name = norm(el.getAttribute('alt') || el.getAttribute('aria-label') || el.getAttribute('title') || '');
      } else if (role === 'textbox') {   // contenteditable
        name = norm(el.getAttribute('aria-label') || '');
        const v = norm(el.innerText); if (v) props.push(['value', v]);
      } else {
        name = norm(el.getAttribute('aria-label') || '');
        if (role === 'checkbox' || role === 'radio' || role === 'switch') {
          if (el.getAttribute('aria-checked') === 'true') props.push(['checked', null]);
        }
      }
    } else {
      const cur = cs.cursor;
      for (const c of el.childNodes) {
        if (c.nodeType === 3) {
          const t = norm(c.data);
          if (t && !hidden) kids.push(textNode(t));
        } else if (c.nodeType === 1) {
          const sub = walk(c, cur);
          for (const s of sub) kids.push(s);
        }
      }
    }
    if (hidden) return kids;
    const tabbable = el.hasAttribute('tabindex') && el.tabIndex >= 0;
    const click = !INTERACTIVE[role] && (hasHandler(el) || (cs.cursor === 'pointer' && parentCursor !== 'pointer'));
    if (el.disabled || el.getAttribute('aria-disabled') === 'true') props.push(['disabled', null]);
    const ex = el.getAttribute('aria-expanded');
    if (ex === 'true') props.push(['expanded', null]); else if (ex === 'false') props.push(['collapsed', null]);
    if (el.getAttribute('aria-selected') === 'true' && role !== 'option') props.push(['selected', null]);
    const hp = el.getAttribute('aria-haspopup');
    if (hp && hp !== 'false') props.push(['haspopup', null]);
    if (role === 'option' && (el.getAttribute('aria-selected') === 'true')) props.push(['selected', null]);
    if ((role === 'checkbox' || role === 'radio' || role === 'menuitemcheckbox') && tag !== 'INPUT' && el.getAttribute('aria-checked') === 'true' && !props.some(p => p[0] === 'checked')) props.push(['checked', null]);

    // <label> wrapping exactly one control: the control takes the label's text as its name
    if (role === 'label') {
      const ctrls = kids.filter(k => k.act || INTERACTIVE[k.role]);
      const others = kids.filter(k => !(k.act || INTERACTIVE[k.role]));
      if (ctrls.length === 1 && others.every(k => k.role === 'text' && !k.kids.length)) {
        const c = ctrls[0];
        const t = norm(others.map(k => k.name).join(' '));
        if (!c.name) c.name = t;
        return [c];
      }
      if (!kids.length) return [];
    }
    if (!role) {
      if (!kids.length) {
        if (!click && !tabbable) return [];
        role = 'generic';
        name = norm(el.getAttribute('aria-label') || el.getAttribute('title') || '');
      } else if (allText(kids)) {
        role = 'text';
      } else if (!click && !tabbable) {
        return kids;                                        // a plain container: flatten
      } else {
        role = 'generic';
      }
    } else if ((role === 'list' || role === 'table' || role === 'rowgroup' || role === 'presentation' || role === 'none' || role === 'form') && !click) {
      return kids;
    }
    if (NAME_FROM_CONTENT[role] || role === 'generic') {
      if (allText(kids)) { if (!name) name = norm(kids.map(k => k.name).join(' ')); kids = []; }
      else if (!name) {
        // a leading run of loose text names the node (e.g. "<li>Folder <ul>...</ul></li>")
        let i = 0; const parts = [];
        while (i < kids.length && kids[i].role === 'text' && !kids[i].el && !kids[i].kids.length) { parts.push(kids[i].name); i++; }
        if (parts.length) { name = norm(parts.join(' ')); kids = kids.slice(i); }
      }
    }
    if (!name && (click || tabbable) && (role === 'generic' || role === 'listitem') && kids.length) {
      // a clickable item (an email row, a menu entry) is named by its own loose/plain text lines
      const own = kids.filter(k => k.role === 'text' && !k.act && !k.kids.length);
      if (own.length && own.length < kids.length) { name = norm(own.map(k => k.name).join(' ')); kids = kids.filter(k => own.indexOf(k) < 0); }
    }
    if (!name && (role === 'button' || role === 'link')) name = norm(el.getAttribute('aria-label') || el.getAttribute('title') || el.value || '');
    if (!name && !kids.length && !INTERACTIVE[role] && !click && !tabbable && role !== 'img' && role !== 'canvas' && role !== 'svg' && role !== 'generic') return [];
    if (click) props.push(['clickable', null]);
    const act = !!(INTERACTIVE[role] || click || tabbable || role === 'label' || role === 'canvas' || role === 'svg');
    if (role === 'generic' && !name) {
      // a nameless widget (an icon): its DOM id / classes are the only hint of what it is
      if (el.id) props.push(['id', el.id]);
      const cls = (typeof el.className === 'string' ? el.className : '').trim().split(/\s+/).filter(Boolean).slice(0, 3).join(' ');
      if (cls) props.push(['class', cls]);
    }
    const node = {el, role, name, props, kids, act};
    // a nameless node around exactly one element: one line (e.g. <li role=tab><a>Tab 1</a></li>)
    if (!name && kids.length === 1 && kids[0].el && !KEEP_CONTAINER[role] && role !== 'label') return [merge(node, kids[0])];
    return [node];
  }

  const WEAK = {'': 1, text: 1, generic: 1, link: 1, listitem: 1, cell: 1, row: 0};
  function merge(outer, inner) {
    const role = (WEAK[inner.role] && !WEAK[outer.role]) ? outer.role : inner.role;
    const el = (!inner.act && outer.act) ? outer.el : inner.el;
    const props = [];
    const seen = {};
    const innerGenericHints = role !== 'generic';
    for (const p of inner.props.concat(outer.props)) {
      if (seen[p[0]]) continue;
      if ((p[0] === 'class' || p[0] === 'id') && innerGenericHints) continue;
      if (p[0] === 'clickable' && INTERACTIVE[role]) continue;
      seen[p[0]] = 1; props.push(p);
    }
    return {el, role, name: inner.name, props, kids: inner.kids, act: !!(outer.act || inner.act)};
  }

  let next = args.nextId | 0;
  if (args.reset) {
    for (const e of document.querySelectorAll('[' + ATTR + ']')) e.removeAttribute(ATTR);
    next = 1;
  }
  const roots = walk(document.body, 'auto');
  const out = [];
  const seen = new Set();
  const elIds = new Map();
  function emit(n, depth) {
    let id = null;
    if (n.el) {
      const a = n.el.getAttribute(ATTR);
      let v = a === null ? NaN : parseInt(a, 10);
      if (!(v > 0) || seen.has(v)) { v = next++; n.el.setAttribute(ATTR, String(v)); }
      else if (v >= next) next = v + 1;
      seen.add(v); id = v; elIds.set(n.el, v);
    }
    out.push([depth, id, n.role, n.name, n.props, n.act ? 1 : 0]);
    for (const k of n.kids) emit(k, depth + 1);
  }
  for (const r of roots) emit(r, 0);
  let focused = null;
  let a = document.activeElement;
  while (a && a !== document.body && a !== document.documentElement) {
    if (elIds.has(a)) { focused = elIds.get(a); break; }
    a = a.parentElement;
  }
  const hasCore = typeof core !== 'undefined' && core && typeof core.getUtterance === 'function';
  let instruction = '';
  try { instruction = hasCore ? core.getUtterance() : norm(document.title); } catch (e) {}
  // one JSON string: Playwright's value serializer (and the Python side's parser) cost several
  // times more than JSON.stringify / json.loads for this nested list
  return JSON.stringify({
    lines: out, next: next, focused: focused, instruction: instruction, url: location.href,
    done: typeof WOB_DONE_GLOBAL !== 'undefined' ? !!WOB_DONE_GLOBAL : false,
    raw_reward: typeof WOB_RAW_REWARD_GLOBAL !== 'undefined' ? +WOB_RAW_REWARD_GLOBAL : 0,
    reward: typeof WOB_REWARD_GLOBAL !== 'undefined' ? +WOB_REWARD_GLOBAL : 0,
    reason: typeof WOB_REWARD_REASON !== 'undefined' && WOB_REWARD_REASON !== null ? String(WOB_REWARD_REASON) : null,
    ready: typeof WOB_TASK_READY !== 'undefined' ? !!WOB_TASK_READY : true,
    wob_episode: typeof WOB_EPISODE_ID !== 'undefined' ? WOB_EPISODE_ID : null,
    settled_ms: args.settled === undefined ? null : args.settled,
  });
}
"""


# Settling: after an action the observation waits until the page has rendered a frame and its DOM
# has not changed for ``settleMs`` (capped at ``settleMaxMs``), so it shows the action's settled
# effect (handlers deferred by setTimeout/rAF, a jQuery animation: its 13 ms ticks keep the DOM
# busy until it ends) instead of whatever a race with those timers gives.  MiniWoB's own timer
# display and our id attributes do not count as changes.  Sets ``args.settled`` (ms waited).
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
    } else setTimeout(check, framed ? Math.max(1, quiet - (now - last)) : 4);
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
    ):
        self.budget = budget
        self.measure = measure
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
        tree, trunc = truncate_lines(lines, self.budget, self.measure)
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
