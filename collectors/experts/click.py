"""Experts for the clicking tasks: a named button or link, dialogs, click-test, button
sequences, checkboxes and radio options, a widget by kind (click-*, unicode-test)."""

from __future__ import annotations

import re

from collectors.experts.base import click_named, quoted, submit
from core.pagetree import descendants, find, first
from core.spaces import Action


def click_button(instr, nodes, obs, history):
    q = quoted(instr)
    return click_named(nodes, q[0], ("button",)) if q else None


def click_link(instr, nodes, obs, history):
    q = quoted(instr)
    if not q:
        return None
    return click_named(nodes, q[0], ("link", "text", "generic"))


def _checkbox_targets(instr: str) -> list[str] | None:
    m = re.search(r"Select (.*) and click Submit", instr)
    if not m:
        return None
    s = m.group(1).strip()
    if s == "nothing":
        return []
    return [w.strip() for w in s.split(",") if w.strip()]


def click_checkboxes(instr, nodes, obs, history):
    want = _checkbox_targets(instr)
    if want is None:
        return None
    for cb in find(nodes, role="checkbox"):
        if (cb.name in want) != cb.has("checked"):
            return Action.click(cb.id)
    return submit(nodes)


def click_option(instr, nodes, obs, history):
    want = _checkbox_targets(instr)
    if not want:
        return None
    r = first(nodes, role="radio", name=want[0])
    if r is None:
        return None
    if not r.has("checked"):
        return Action.click(r.id)
    return submit(nodes)


def click_dialog(instr, nodes, obs, history):
    return click_named(nodes, "Close", ("button",))


def click_dialog_2(instr, nodes, obs, history):
    q = quoted(instr)
    if not q:
        return None
    name = "Close" if q[0].lower() == "x" else q[0]
    dlg = first(nodes, role="dialog")
    scope = descendants(nodes, dlg) if dlg else nodes
    return click_named(scope, name, ("button",))


def click_test(instr, nodes, obs, history):
    b = find(nodes, role="button")
    return Action.click(b[0].id) if b else None


def click_test_2(instr, nodes, obs, history):
    m = re.search(r"button (\w+)", instr)
    return click_named(nodes, m.group(1), ("button",)) if m else None


def click_button_sequence(instr, nodes, obs, history):
    clicked = sum(1 for _, a in history if a.kind == "click")
    return click_named(nodes, "ONE" if clicked == 0 else "TWO", ("button",))


def click_widget(instr, nodes, obs, history):
    q = quoted(instr)
    if not q:
        return None
    kind = q[0]
    role = {
        "checkbox": "checkbox",
        "radio": "radio",
        "textfield": "textbox",
        "text": "textbox",
        "button": "button",
        "textarea": "textbox",
    }.get(kind, kind)
    cands = find(nodes, role=role)
    if kind == "textarea":
        cands = [c for c in cands if c.has("multiline")]
    elif kind in ("text", "textfield"):
        cands = [c for c in cands if not c.has("multiline")]
    return Action.click(cands[0].id) if cands else None


def unicode_test(instr, nodes, obs, history):
    return click_button(instr, nodes, obs, history)
