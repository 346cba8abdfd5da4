"""The pointer actions on real Chromium and real MiniWoB++ pages: drag, select_text,
click_at, hover and key chords reach the rewards the tasks give, and bad targets are reported
as the next observation's error."""

from __future__ import annotations

import pytest

from collectors.env import WebEnv
from core.pagetree import first, parse_tree
from core.spaces import Action

pytestmark = pytest.mark.integration


def _node(tree: str, **kw):
    n = first(parse_tree(tree), **kw)
    assert n is not None, tree
    return n


def test_drag_and_select_text_and_click_at_solve_their_tasks(bl) -> None:
    async def go():
        out = {}
        async with WebEnv(bl.browser, bl.base_url) as env:
            obs, _ = await env.reset("miniwob/drag-box", 1)
            small, large = _node(obs.tree, name="s"), _node(obs.tree, name="L")
            assert small.box and large.box  # draggable elements carry boxes
            obs, *_ = await env.step(Action.drag(small.id, large.id))
            sub = _node(obs.tree, role="button", name="Submit")
            out["drag"] = await env.step(Action.click(sub.id))

            obs, _ = await env.reset("miniwob/highlight-text", 1)
            para = _node(obs.tree, role="text")
            obs, *_ = await env.step(Action.select_text(para.id, para.name))
            selected = await env.page.evaluate("() => window.getSelection().toString()")
            out["selected"] = (selected, para.name)
            sub = _node(obs.tree, role="button", name="Submit")
            out["select_text"] = await env.step(Action.click(sub.id))

            obs, _ = await env.reset("miniwob/circle-center", 1)
            svg, circle = _node(obs.tree, role="svg"), _node(obs.tree, role="circle")
            (sx, sy, _, _), (cx, cy, w, h) = svg.box, circle.box
            obs, *_ = await env.step(Action.click_at(svg.id, cx + w // 2 - sx, cy + h // 2 - sy))
            sub = _node(obs.tree, role="button", name="Submit")
            out["click_at"] = await env.step(Action.click(sub.id))
        return out

    out = bl.run(go())
    assert out["drag"][1] == 1.0 and out["drag"][2]
    assert out["selected"][0].split() == out["selected"][1].split()
    assert out["select_text"][1] == 1.0
    assert out["click_at"][1] > 0.5 and out["click_at"][2]  # reward falls with the distance


def test_hover_chords_and_errors(bl) -> None:
    async def go():
        async with WebEnv(bl.browser, bl.base_url) as env:
            obs, _ = await env.reset("miniwob/enter-text", 2)
            box = _node(obs.tree, role="textbox")
            button = _node(obs.tree, role="button")
            await env.step(Action.type(box.id, "hello there"))
            await env.step(Action.press("Control+a"))
            o_del, *_ = await env.step(Action.press("Backspace"))
            value = await env.page.evaluate("() => document.querySelector('input').value")
            await env.step(Action.hover(button.id))
            hovered = await env.page.evaluate(
                "() => Array.from(document.querySelectorAll(':hover')).map(e => e.tagName)"
            )
            o_missing, *_ = await env.step(Action.select_text(box.id, "absent words"))
            o_target, *_ = await env.step(Action.drag(box.id, 999))
            o_key, *_ = await env.step(Action.press("Hyper+a"))
            o_at, *_ = await env.step(Action.click_at(box.id, 2, 2))
            focused = o_at.focused
            return value, hovered, o_missing, o_target, o_key, focused, box.id

    value, hovered, o_missing, o_target, o_key, focused, box_id = bl.run(go())
    assert value == ""  # Control+a selected everything, Backspace deleted it
    assert "BUTTON" in hovered
    assert "not in the field" in o_missing.last_action_error
    assert o_target.last_action_error == "drag target [999] is not on the page"
    assert o_key.last_action_error.startswith("unknown key 'Hyper+a'")
    assert focused == box_id  # click_at inside the field's box focused it
