"""The to-do task's reset, check and scripted expert."""

from __future__ import annotations

from collectors.experts.base import Expert, quoted
from core.pagetree import first
from core.spaces import Action


async def reset(ep) -> None:
    await ep.control("reset")  # this browser's list, emptied


async def added(ep) -> tuple[bool, str]:
    todos = (await ep.control("state"))["todos"]
    want = ep.params["item"]["text"]
    return todos == [want], f"the list holds {todos}, expected [{want!r}]"


class AddItem(Expert):
    def decide(self, instr, nodes, obs, history):
        item = quoted(instr)[0]
        # a list item is shown without an [id] (nothing acts on it): with_id=False finds it
        if first(nodes, role="listitem", name=item, with_id=False):
            return Action.stop()
        box = first(nodes, role="textbox", name="New item")
        if box.value != item:
            return Action.type(box.id, item)
        return Action.click(first(nodes, role="button", name="Add").id)


EXPERTS = {"todo/add-item": AddItem()}
