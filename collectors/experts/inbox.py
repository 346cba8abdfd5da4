"""The expert of the email-inbox tasks (star, delete, reply, forward; plain and NL forms)."""

from __future__ import annotations

import re

from core.pagetree import CLICKABLE_TEXT, TEXTBOX, Node, find, first
from core.spaces import Action


def email_inbox(instr, nodes, obs, history):
    """email-inbox and its variants (star, delete, reply, forward; NL forms)."""
    fields = _email_fields(instr)
    if fields is None:
        return None
    task, by = fields.get("task"), fields.get("by")
    send = first(
        nodes, role="generic", pred=lambda n: n.props.get("id") in ("send-reply", "send-forward")
    )
    if send is not None:  # the reply / forward form is open
        return _fill_and_send(nodes, send, fields)
    reply = first(nodes, role=CLICKABLE_TEXT, name="Reply", pred=lambda n: n.has("clickable"))
    if reply is not None:  # one email is open
        return _act_on_email(nodes, reply, task)
    hit = _open_thread(nodes, task, by)
    return hit if hit is not None else _search_inbox(nodes, by, history)


def _fill_and_send(nodes: list[Node], send: Node, fields: dict) -> Action:
    """The reply / forward form: type the message (reply) or the recipient (forward), then send."""
    if send.props.get("id") == "send-reply":
        body = [b for b in find(nodes, role="textbox") if b.has("multiline")] or find(
            nodes, role="textbox"
        )
        if body and body[-1].value != fields.get("message", ""):
            return Action.type(body[-1].id, fields.get("message", ""))
    else:
        to = first(nodes, role="textbox", pred=lambda n: not n.has("multiline"))
        if to is not None and to.value != fields.get("to", ""):
            return Action.type(to.id, fields.get("to", ""))
    return Action.click(send.id)


def _act_on_email(nodes: list[Node], reply: Node, task: str | None) -> Action | None:
    """One email is open: reply, forward, or its star / trash icon."""
    if task == "reply":
        return Action.click(reply.id)
    if task == "forward":
        fw = first(nodes, role=CLICKABLE_TEXT, name="Forward", pred=lambda n: n.has("clickable"))
        return Action.click(fw.id) if fw else None
    cls = "star" if task == "star" else "trash"
    b = first(nodes, role="generic", pred=lambda n: cls in n.classes)
    return Action.click(b.id) if b else None


def _open_thread(nodes: list[Node], task: str | None, by: str) -> Action | None:
    """The inbox list: the sender's thread (its name starts with the sender; may be cut short) --
    its star / trash icon for those tasks, else the thread itself; None if it is not in view."""
    for th in find(
        nodes, role=("generic", "text"), pred=lambda n: n.has("clickable") and bool(n.name)
    ):
        nm = th.name.rstrip("…")
        if not (
            nm == by or nm.startswith(by + " ") or (th.name.endswith("…") and by.startswith(nm))
        ):
            continue
        kids = [nodes[i] for i in th.children]
        if task in ("star", "delete"):
            cls = "star" if task == "star" else "trash"
            b = next((k for k in kids if k.role == "generic" and cls in k.classes), None)
            if b is not None:
                return Action.click(b.id)
        return Action.click(th.id)
    return None


def _search_inbox(nodes: list[Node], by: str, history: list) -> Action | None:
    """The thread is not in view (the tree was cut to the budget): use the inbox search."""
    search = first(nodes, role=TEXTBOX, pred=lambda n: not n.has("multiline"))
    if search is not None:
        if search.value != by:
            return Action.type(search.id, by)
        if history and history[-1][1].kind == "type":
            return Action.press("Enter")  # the inbox searches on key events, not on input
        return None
    opener = first(nodes, role="generic", pred=lambda n: n.props.get("id") == "open-search")
    return Action.click(opener.id) if opener else None


def _email_fields(instr: str) -> dict | None:
    if instr.startswith("{"):
        try:
            import ast

            d = ast.literal_eval(instr)
            f = dict(d.get("fields", {}))
        except (ValueError, SyntaxError):
            return None
        if "to" in f:
            f.setdefault("task", "forward")
        elif "message" in f:
            f.setdefault("task", "reply")
        return f
    m = re.search(
        r"Find the email by (.+?) and (click the star icon|click the trash icon|reply to them with the text \"(.*)\"|forward that email to (.+?)\.$)",
        instr,
    )
    if not m:
        return None
    by = m.group(1)
    act = m.group(2)
    if act.startswith("click the star"):
        return {"task": "star", "by": by}
    if act.startswith("click the trash"):
        return {"task": "delete", "by": by}
    if act.startswith("reply"):
        return {"task": "reply", "by": by, "message": m.group(3)}
    return {"task": "forward", "by": by, "to": m.group(4)}
