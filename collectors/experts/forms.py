"""Experts for text entry and forms: enter-text/password/date/time, focus-text, login-user
(and its popup), lists and dropdowns (choose-list, click-scroll-list), copy-paste,
text-transform, form-sequence, multi-layouts/orderings, use-spinner."""

from __future__ import annotations

import re

from collectors.experts.base import (
    click_named,
    field_for,
    fill_then,
    label_after,
    label_before,
    ordinal,
    quoted,
    submit,
    textboxes,
)
from core.pagetree import TEXTBOX, find, first
from core.spaces import Action


def enter_text(instr, nodes, obs, history):
    q = quoted(instr)
    boxes = textboxes(nodes)
    if not q or not boxes:
        return None
    return fill_then(nodes, [(boxes[0], q[0])], submit(nodes))


def enter_text_2(instr, nodes, obs, history):
    q = quoted(instr)
    boxes = textboxes(nodes)
    if not q or not boxes:
        return None
    want = (
        q[0].lower() if "lower case" in instr else q[0].upper() if "upper case" in instr else q[0]
    )
    return fill_then(nodes, [(boxes[0], want)], submit(nodes))


def enter_password(instr, nodes, obs, history):
    q = quoted(instr)
    boxes = textboxes(nodes)
    if not q or len(boxes) < 2:
        return None
    return fill_then(nodes, [(boxes[0], q[0]), (boxes[1], q[0])], submit(nodes))


def focus_text(instr, nodes, obs, history):
    boxes = textboxes(nodes)
    return Action.click(boxes[0].id) if boxes else None


def focus_text_2(instr, nodes, obs, history):
    k = ordinal(instr)
    boxes = textboxes(nodes)
    if not k or len(boxes) < k:
        return None
    return Action.click(boxes[k - 1].id)


def login_user(instr, nodes, obs, history):
    q = quoted(instr)
    if len(q) < 2:
        return None
    cancel = first(nodes, role="button", name="Cancel")
    if cancel:  # login-user-popup: dismiss the "session expires" popup, never press its OK
        return Action.click(cancel.id)
    user = field_for(nodes, "username")
    pw = field_for(nodes, "password")
    boxes = textboxes(nodes)
    if user is None and boxes:
        user = boxes[0]
    if pw is None and len(boxes) > 1:
        pw = boxes[1]
    if user is None or pw is None:
        return None
    login = (
        submit(nodes, ("Login", "OK", "Submit"))
        if first(nodes, role="button", name="Login") or True
        else None
    )
    return fill_then(nodes, [(user, q[0]), (pw, q[1])], login)


def choose_list(instr, nodes, obs, history):
    m = re.search(r"Select (.*) from the (?:scroll )?list", instr)
    if not m:
        return None
    box = first(nodes, role=("combobox", "listbox"))
    if box is None:
        return None
    opts = [nodes[i] for i in box.children if nodes[i].role == "option"]
    names = {o.name for o in opts}
    target = m.group(1).strip()
    want = (
        [target]
        if target in names or box.role == "combobox"
        else [w.strip() for w in target.split(",")]
    )
    if box.role == "combobox":
        if box.value != want[0]:
            return Action.select(box.id, want[0])
        return submit(nodes)
    for o in opts:  # a list: toggle until exactly the wanted options are selected
        if (o.name in want) != o.has("selected"):
            return Action.select(box.id, o.name)
    return submit(nodes)


def copy_paste(instr, nodes, obs, history):
    boxes = find(nodes, role="textbox")
    areas = [b for b in boxes if b.has("multiline")]
    targets = [b for b in boxes if not b.has("multiline")]
    if not areas or not targets:
        return None
    k = ordinal(instr) or 1
    if k > len(areas):
        return None
    src = areas[k - 1]
    if not src.value:
        return None
    return fill_then(nodes, [(targets[0], src.value)], submit(nodes))


def text_transform(instr, nodes, obs, history):
    box = first(nodes, role=TEXTBOX)
    cap = first(nodes, role="text", pred=lambda n: n.id != (box.id if box else None))
    if box is None or cap is None:
        return None
    return fill_then(nodes, [(box, cap.name.replace(" ", ""))], submit(nodes))


def enter_date(instr, nodes, obs, history):
    m = re.search(r"(\d\d)/(\d\d)/(\d{4})", instr)
    box = first(nodes, role=TEXTBOX)
    if not m or box is None:
        return None
    iso = f"{m.group(3)}-{m.group(1)}-{m.group(2)}"
    return fill_then(nodes, [(box, iso)], submit(nodes))


def enter_time(instr, nodes, obs, history):
    m = re.search(r"(\d{1,2}):(\d\d) ?(AM|PM)", instr)
    box = first(nodes, role=TEXTBOX)
    if not m or box is None:
        return None
    h, mi, ap = int(m.group(1)), m.group(2), m.group(3)
    h = (h % 12) + (12 if ap == "PM" else 0)
    return fill_then(nodes, [(box, f"{h:02d}:{mi}")], submit(nodes))


def form_sequence_2(instr, nodes, obs, history):
    m = re.search(
        r"Check the (\w+) radio button and enter the number \"(-?\d+)\" into the (\w+) textbox",
        instr,
    )
    if not m:
        return None
    ri, val, ti = ordinal(m.group(1)), m.group(2), ordinal(m.group(3))
    radios = find(nodes, role="radio")
    boxes = textboxes(nodes)
    if not ri or not ti or len(radios) < ri or len(boxes) < ti:
        return None
    if not radios[ri - 1].has("checked"):
        return Action.click(radios[ri - 1].id)
    return fill_then(nodes, [(boxes[ti - 1], val)], submit(nodes))


def form_sequence_3(instr, nodes, obs, history):
    m = re.search(r"Choose (.+?) from the dropdown, then click the button labeled \"(.+?)\"", instr)
    if not m:
        return None
    opt, btn = m.group(1), m.group(2)
    box = first(nodes, role="combobox")
    if box is None:
        return None
    if box.value != opt:
        return Action.select(box.id, opt)
    return click_named(nodes, btn, ("button",))


def multi_layouts(instr, nodes, obs, history):
    m = re.search(r"Search for (\w+) movies directed by (.+?) from year (\d+)", instr)
    if not m:
        return None
    want = {"genre": m.group(1), "director": m.group(2), "year": m.group(3), "date": m.group(3)}
    boxes = textboxes(nodes)
    labels = [(b.name or label_before(nodes, b)).lower() for b in boxes]
    if not all(labels):  # labels follow their fields in some layouts
        labels = [(b.name or label_after(nodes, b)).lower() for b in boxes]
    pairs = []
    for box, label in zip(boxes, labels, strict=False):
        for k, v in want.items():
            if k in label:
                pairs.append((box, v))
                break
        else:
            return None
    return fill_then(nodes, pairs, submit(nodes, ("Submit", "Go!", "Search")))


def use_spinner(instr, nodes, obs, history):
    m = re.search(r"Select (-?\d+) with the spinner", instr)
    box = first(nodes, role=("spinbutton", "textbox"))
    if not m or box is None:
        return None
    return fill_then(nodes, [(box, m.group(1))], submit(nodes))
