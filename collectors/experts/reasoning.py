"""Experts that compute their answer from the page: arithmetic and algebra, tables, the n-th
word, number games (guess-number, odd-or-even, find-greatest, generate-number) and buy-ticket."""

from __future__ import annotations

import re

from collectors.experts.base import click_named, fill_then, label_before, ordinal, submit, textboxes
from core.pagetree import TEXTBOX, Node, find, first, parse_tree
from core.spaces import Action


def simple_arithmetic(instr, nodes, obs, history):
    box = first(nodes, role=TEXTBOX)
    expr = first(nodes, role="text", pred=lambda n: n.name.endswith("="))
    if box is None or expr is None:
        return None
    m = re.fullmatch(r"\s*(-?\d+)\s*([-+x*/])\s*(-?\d+)\s*=\s*", expr.name)
    if not m:
        return None
    a, op, b = int(m.group(1)), m.group(2), int(m.group(3))
    val = {"+": a + b, "-": a - b, "x": a * b, "*": a * b, "/": a // b if b else 0}[op]
    return fill_then(nodes, [(box, str(val))], submit(nodes))


def simple_algebra(instr, nodes, obs, history):
    box = first(nodes, role=TEXTBOX)
    eq = first(
        nodes,
        role="text",
        pred=lambda n: "x" in n.name and "=" in n.name and n.name.strip() != "x =",
    )
    if box is None or eq is None:
        return None
    m = re.fullmatch(r"\s*(-?\d+|x)\s*([-+])\s*(-?\d+|x)\s*=\s*(-?\d+)\s*", eq.name)
    if not m:
        return None
    left, op, right, total = m.group(1), m.group(2), m.group(3), int(m.group(4))
    if left == "x":
        val = total - int(right) if op == "+" else total + int(right)
    else:
        val = total - int(left) if op == "+" else int(left) - total
    return fill_then(nodes, [(box, str(val))], submit(nodes))


def read_table(instr, nodes, obs, history):
    m = re.search(r"value of (.+?) into", instr)
    box = first(nodes, role=TEXTBOX)
    if not m or box is None:
        return None
    key = m.group(1).strip()
    val = _table_value(nodes, key)
    if val is None:
        return None
    return fill_then(nodes, [(box, val)], submit(nodes))


def _table_value(nodes: list[Node], key: str) -> str | None:
    for row in find(nodes, role="row"):
        cells = [nodes[i] for i in row.children]
        if len(cells) >= 2 and cells[0].name.strip(": ").lower() == key.strip(": ").lower():
            return cells[1].name
    return None


def read_table_2(instr, nodes, obs, history):
    pairs = []
    for box in textboxes(nodes):
        label = (box.name or label_before(nodes, box)).strip(": ")
        val = _table_value(nodes, label)
        if val is None:
            return None
        pairs.append((box, val))
    return fill_then(nodes, pairs, submit(nodes)) if pairs else None


def find_word(instr, nodes, obs, history):
    k = ordinal(instr)
    box = first(nodes, role=TEXTBOX)
    para = first(nodes, role="text", pred=lambda n: len(n.name.split()) > 2)
    if not k or box is None or para is None:
        return None
    words = para.name.split()
    if k > len(words):
        return None
    return fill_then(nodes, [(box, words[k - 1])], submit(nodes))


def guess_number(instr, nodes, obs, history):
    """Binary search on 0-9 using the feedback line ("higher" / "lower") after each guess."""
    box = first(nodes, role=TEXTBOX)
    if box is None:
        return None
    if history and history[-1][1].kind == "type":
        return submit(nodes)  # submit the guess just typed
    lo, hi = 0, 9
    guess = None
    for i, (_ob, a) in enumerate(history):
        if a.kind == "type":
            guess = int(a.text)
        elif a.kind == "click" and guess is not None:
            after = history[i + 1][0] if i + 1 < len(history) else obs
            fb = first(
                parse_tree(after.tree),
                role="text",
                pred=lambda n: "higher" in n.name.lower() or "lower" in n.name.lower(),
            )
            if fb is not None and "higher" in fb.name.lower():
                lo = max(lo, guess + 1)
            elif fb is not None and "lower" in fb.name.lower():
                hi = min(hi, guess - 1)
            guess = None
    return Action.type(box.id, str((lo + hi) // 2))


def odd_or_even(instr, nodes, obs, history):
    # rows: [Odd] number [Even]; a pressed button keeps no state in the tree, so use history
    done = {a.element for _, a in history if a.kind == "click"}
    buttons = find(nodes, role="button")
    for i, n in enumerate(nodes):
        if n.role == "text" and re.fullmatch(r"-?\d+", n.name):
            odd = nodes[i - 1] if i > 0 else None
            even = nodes[i + 1] if i + 1 < len(nodes) else None
            if not (odd and even and odd.name == "Odd" and even.name == "Even"):
                continue
            if odd.id in done or even.id in done:
                continue
            return Action.click((odd if int(n.name) % 2 else even).id)
    _ = buttons
    return submit(nodes)


def buy_ticket(instr, nodes, obs, history):
    books = find(nodes, role="button", pred=lambda n: n.name.startswith("Book for $"))
    if not books:
        return None
    cheap = "cheap" in instr

    def key(n):
        return int(re.sub(r"\D", "", n.name))

    if "cost" in instr:
        b = min(books, key=key) if cheap else max(books, key=key)
        return Action.click(b.id)

    # duration: the text line before each button
    def dur(b: Node) -> int:
        t = label_before(nodes, b)
        m = re.match(r"(\d+)h (\d+)m", t)
        return int(m.group(1)) * 60 + int(m.group(2)) if m else 10**9

    b = min(books, key=dur) if ("shortest" in instr or "least" in instr) else max(books, key=dur)
    return Action.click(b.id)


def find_greatest(instr, nodes, obs, history):
    cards = find(
        nodes,
        role=("text", "generic"),
        pred=lambda n: n.has("clickable") and re.fullmatch(r"-?\d+", n.name or ""),
    )
    if not cards:
        return None
    clicked = {a.element for _, a in history if a.kind == "click"}
    best = max(cards, key=lambda n: int(n.name))
    if best.id not in clicked:
        return Action.click(best.id)
    return submit(nodes)


def generate_number(instr, nodes, obs, history):
    m = re.search(
        r"Generate (?:a|an) (?:number )?(less than|greater than|more than|even|odd)(?: (-?\d+))?",
        instr,
    )
    if not m:
        return None
    kind = m.group(1)
    cur = first(nodes, role="text", pred=lambda n: re.fullmatch(r"-?\d+", n.name or "") is not None)
    if cur is not None:
        v = int(cur.name)
        if kind == "even":
            ok = v % 2 == 0
        elif kind == "odd":
            ok = v % 2 == 1
        elif kind == "less than":
            ok = v < int(m.group(2))
        else:
            ok = v > int(m.group(2))
        if ok:
            return submit(nodes)
    return click_named(nodes, "Generate", ("button",))
