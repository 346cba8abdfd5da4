"""Experts that find their target by opening things: tabs, collapsible sections, the folder
tree, menus, an autocomplete's suggestions and a search engine's result pages."""

from __future__ import annotations

import re

from collectors.experts.base import click_named, ordinal, quoted, submit
from core.pagetree import TEXTBOX, Node, descendants, find, first, parse_tree
from core.spaces import Action


def click_tab(instr, nodes, obs, history):
    m = re.search(r"Tab #(\d+)", instr)
    return click_named(nodes, f"Tab #{m.group(1)}", ("tab",)) if m else None


def click_tab_2(instr, nodes, obs, history):
    q = quoted(instr)
    if not q:
        return None
    panel = first(nodes, role="tabpanel", with_id=False)
    scope = descendants(nodes, panel) if panel else nodes
    hit = first(
        scope,
        role=("link", "text", "generic"),
        name=q[0],
        pred=lambda n: n.has("clickable") or n.role == "link",
    )
    if hit:
        return Action.click(hit.id)
    tabs = find(nodes, role="tab")
    tried = {a.element for _, a in history if a.kind == "click"}
    for t in tabs:
        if not t.has("selected") and t.id not in tried:
            return Action.click(t.id)
    return None


def navigate_tree(instr, nodes, obs, history):
    """Depth-first search over the folders, collapsing each explored one (keeps the tree small)."""
    q = quoted(instr)
    if not q:
        return None
    target = first(
        nodes,
        role=("text", "listitem", "generic", "link"),
        name=q[0],
        pred=lambda n: n.role != "generic" or n.has("clickable"),
    )
    if target:
        return Action.click(target.id)
    explored = set()
    for ob, a in history:  # folders we collapsed before are done
        if a.kind == "click":
            ns = parse_tree(ob.tree)
            hit = [n for n in ns if n.id == a.element]
            if hit and "colla" in (hit[0].props.get("class") or ""):
                explored.add(_folder_name(ns, hit[0]))

    def hitarea(n: Node) -> Node | None:
        for i in n.children:
            if nodes[i].role == "generic" and "hitarea" in (nodes[i].props.get("class") or ""):
                return nodes[i]
        return None

    folders = [(n, hitarea(n)) for n in nodes if n.role == "listitem" and hitarea(n) is not None]
    expanded = [(f, h) for f, h in folders if "colla" in (h.props.get("class") or "")]
    # the deepest open folder: open its next unexplored sub-folder, else close it
    for f, h in sorted(expanded, key=lambda fh: -fh[0].depth):
        subs = [(g, gh) for g, gh in folders if g.parent == f.index]
        for _g, gh in subs:
            if "expan" in (gh.props.get("class") or "") and _folder_name(nodes, gh) not in explored:
                return Action.click(gh.id)
        return Action.click(h.id)
    for f, h in folders:
        if (
            f.depth == 0
            and "expan" in (h.props.get("class") or "")
            and _folder_name(nodes, h) not in explored
        ):
            return Action.click(h.id)
    return None


def _folder_name(nodes: list[Node], hit: Node) -> str:
    nxt = nodes[hit.index + 1] if hit.index + 1 < len(nodes) else None
    return nxt.name if nxt is not None else ""


def click_collapsible(instr, nodes, obs, history):
    sub = submit(nodes)
    headers = find(nodes, role="tab", pred=lambda n: n.name.startswith("Section"))
    if any(h.has("expanded") for h in headers) and sub:
        return sub
    for h in headers:
        if h.has("collapsed"):
            return Action.click(h.id)
    return sub


def click_collapsible_2(instr, nodes, obs, history):
    q = quoted(instr)
    if not q:
        return None
    hit = first(
        nodes,
        role=("link", "text", "generic"),
        name=q[0],
        pred=lambda n: n.has("clickable") or n.role == "link",
    )
    if hit:
        return Action.click(hit.id)
    opened = {a.element for _, a in history if a.kind == "click"}
    for h in find(nodes, role="tab"):
        if h.has("collapsed") and h.id not in opened:
            return Action.click(h.id)
    return None


def use_autocomplete(instr, nodes, obs, history):
    q = quoted(instr)
    if not q:
        return None
    start = q[0]
    end = q[1] if len(q) > 1 else ""
    box = first(nodes, role=TEXTBOX)
    if box is None:
        return None
    v = box.value
    if v.startswith(start) and v.endswith(end) and len(v) > len(start):
        if find(nodes, role=("listitem", "menuitem", "option"), pred=lambda n: n.has("clickable")):
            return Action.press(
                "Tab"
            )  # close the suggestion menu (it may cover Submit); Escape would undo
        return submit(nodes)
    items = find(
        nodes,
        role=("menuitem", "option", "listitem", "text", "generic"),
        pred=lambda n: (
            n.name.startswith(start) and n.name.endswith(end) and n.name != start and n.id != box.id
        ),
    )
    menu = [n for n in items if n.role in ("menuitem", "option", "listitem") or n.has("clickable")]
    if menu:  # typing the item the menu offers is as good as clicking it (and not hover-sensitive)
        return Action.type(box.id, menu[0].name)
    if not v.startswith(start) or v == "":
        return Action.type(box.id, start)
    if v.startswith(start) and v.endswith(end) and len(v) > len(start):
        return submit(nodes)
    if v == start and v.endswith(end) and _waits_since_type(history) >= 3:
        return submit(nodes)  # the answer is the start text itself: no longer suggestion came
    return None


def _waits_since_type(history) -> int:
    n = 0
    for _, a in reversed(history):
        if a.kind == "type":
            break
        n += 1
    return n


def search_engine(instr, nodes, obs, history):
    q = quoted(instr)
    k = ordinal(instr)
    if not q or not k:
        return None
    box = first(nodes, role=TEXTBOX)
    searched = any(a.kind == "click" and _was(history, a, "Search") for _, a in history)
    if not searched:
        if box is not None and box.value != q[0]:
            return Action.type(box.id, q[0])
        return submit(nodes, ("Search",))
    results = [
        n for n in find(nodes, role="link") if not re.fullmatch(r"\d+|<|>|Prev|Next|«|»", n.name)
    ]
    pages = [n for n in find(nodes, role="link") if re.fullmatch(r"\d+", n.name)]
    per_page = 3
    page_needed = (k - 1) // per_page + 1
    cur = _current_page(history)
    if cur == page_needed and results:
        idx = (k - 1) % per_page
        if idx < len(results):
            return Action.click(results[idx].id)
    for p in pages:
        if int(p.name) == page_needed:
            return Action.click(p.id)
    return None


def _was(history: list, action: Action, name: str) -> bool:
    for ob, a in history:
        if a is action:
            n = [x for x in parse_tree(ob.tree) if x.id == a.element]
            return bool(n) and n[0].name == name
    return False


def _current_page(history: list) -> int:
    page = 1
    for ob, a in history:
        if a.kind != "click":
            continue
        n = [x for x in parse_tree(ob.tree) if x.id == a.element]
        if n and n[0].role == "link" and re.fullmatch(r"\d+", n[0].name):
            page = int(n[0].name)
        elif n and n[0].name == "Search":
            page = 1
    return page


def click_menu_2(instr, nodes, obs, history):
    q = quoted(instr)
    if len(q) < 2:
        return None
    item = first(
        nodes,
        role=("menuitem", "link", "text", "listitem"),
        name=q[1],
        pred=lambda n: not n.has("disabled"),
    )
    if item:
        return Action.click(item.id)
    menu = first(nodes, role="menu")
    if menu is None:
        return click_named(nodes, q[0], ("button",))
    tried = {a.element for _, a in history if a.kind == "click"}
    for n in find(
        nodes, role="menuitem", pred=lambda n: n.has("haspopup") and not n.has("disabled")
    ):
        if n.id not in tried:
            return Action.click(n.id)  # opens its submenu
    return None
