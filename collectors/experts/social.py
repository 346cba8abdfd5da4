"""Experts for the social-media tasks: a button on one user's post, or on several."""

from __future__ import annotations

import re

from collectors.experts.base import submit
from core.pagetree import Node, first
from core.spaces import Action


def social_media(instr, nodes, obs, history):
    m = re.search(r"For the user (@\S+), click on the \"(.+?)\" button", instr)
    if not m:
        return None
    user, what = m.group(1).rstrip(","), m.group(2)
    cls = {"Reply": "reply", "Retweet": "retweet", "Like": "like"}.get(what)
    post = _post_of(nodes, user)
    if post is None:
        return None
    if cls:
        b = _post_button(nodes, post, cls)
        return Action.click(b.id) if b else None
    # Share / Copy / Embed / Mute / Block ... live in the "more" menu
    item = first(
        nodes,
        role=("text", "generic", "listitem", "menuitem", "link"),
        name=what,
        pred=lambda n: n.has("clickable") or n.role in ("menuitem", "link"),
    )
    if item:
        return Action.click(item.id)
    b = _post_button(nodes, post, "more")
    return Action.click(b.id) if b else None


def _post_of(nodes: list[Node], user: str, skip: int = 0) -> Node | None:
    hits = [
        n
        for n in nodes
        if n.role == "text" and re.search(rf"(?:^|\s){re.escape(user)}(?:\s|$)", n.name)
    ]
    return hits[skip] if len(hits) > skip else None


def _post_button(nodes: list[Node], post: Node, cls: str) -> Node | None:
    for i in range(post.index + 1, len(nodes)):
        n = nodes[i]
        if n.role == "text" and "@" in n.name and i != post.index:
            break
        if n.role == "generic" and cls in n.classes:
            return n
    return None


def social_media_all(instr, nodes, obs, history):
    m = re.search(
        r"Click the \"(.+?)\" button on (all|\d+) posts by (@\S+) and then click Submit", instr
    )
    if not m:
        return None
    what, count, user = m.group(1), m.group(2), m.group(3)
    cls = {"Reply": "reply", "Retweet": "retweet", "Like": "like"}.get(what, what.lower())
    posts = [
        n
        for n in nodes
        if n.role == "text" and re.search(rf"(?:^|\s){re.escape(user)}(?:\s|$)", n.name)
    ]
    clicked = {a.element for _, a in history if a.kind == "click"}
    need = len(posts) if count == "all" else int(count)
    done = 0
    for p in posts:
        b = _post_button(nodes, p, cls)
        if b is None:
            continue
        if b.id in clicked:
            done += 1
            continue
        if done < need:
            return Action.click(b.id)
    return submit(nodes)
