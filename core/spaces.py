"""Observation and action spaces shared by the live and the dream environment.

Action text form (what the policy writes, what records carry)::

    click(3)
    type(5, "hello world")
    select(7, "Option B")
    press("Enter")
    scroll("down")
    go_back()
    stop("answer")

Strings are JSON string literals, so any text round-trips exactly.
Observation text form (what the policy and the world model read)::

    [1] button "Submit"
    [2] textbox "Username"
      [3] text "nested, two spaces per level"

Element ids are assigned by the environment (document order at reset, later
elements take the next free id), never by Playwright.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field

ACTION_KINDS = ("click", "type", "select", "press", "scroll", "go_back", "stop")
SCROLL_DIRECTIONS = ("up", "down")
KEYS = ("Enter", "Tab", "Escape", "Backspace", "ArrowDown", "ArrowUp", "Space")
EXTRA_KEYS = (
    "ArrowLeft",
    "ArrowRight",
    "Delete",
    "Home",
    "End",
    "PageUp",
    "PageDown",
    "Shift",
    "Control",
)


def precheck_error(action: Action, ids) -> str:
    """The error an action gets before it touches the page ('' when it may run): an element id
    that is not on the page, or an unknown key.  The live environment and dreams share it, so a
    dreamed page carries the same ``Error:`` line a live page would."""
    if action.kind in ("click", "type", "select") and action.element not in ids:
        return f"element [{action.element}] is not on the page"
    if action.kind == "press":
        key = action.text or ""
        if not (key in KEYS or key in EXTRA_KEYS or len(key) == 1):
            return f"unknown key {key!r}; known: {', '.join(KEYS + EXTRA_KEYS)} or one character"
    return ""


class ActionParseError(ValueError):
    pass


@dataclass(frozen=True)
class Action:
    kind: str
    element: int | None = None
    text: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in ACTION_KINDS:
            raise ActionParseError(
                f"unknown action kind {self.kind!r}; known: {', '.join(ACTION_KINDS)}"
            )
        needs_el = self.kind in ("click", "type", "select")
        if needs_el and self.element is None:
            raise ActionParseError(f"{self.kind} needs an element id")
        if not needs_el and self.element is not None:
            raise ActionParseError(f"{self.kind} takes no element id")
        needs_text = self.kind in ("type", "select", "press", "scroll")
        if needs_text and self.text is None:
            raise ActionParseError(f"{self.kind} needs a text argument")
        if self.kind == "scroll" and self.text not in SCROLL_DIRECTIONS:
            raise ActionParseError(
                f"scroll direction must be one of {SCROLL_DIRECTIONS}, got {self.text!r}"
            )

    def to_text(self) -> str:
        args: list[str] = []
        if self.element is not None:
            args.append(str(self.element))
        if self.text is not None:
            args.append(json.dumps(self.text, ensure_ascii=False))
        return f"{self.kind}({', '.join(args)})"

    # convenience constructors
    @staticmethod
    def click(el: int) -> Action:
        return Action("click", el)

    @staticmethod
    def type(el: int, text: str) -> Action:
        return Action("type", el, text)

    @staticmethod
    def select(el: int, option: str) -> Action:
        return Action("select", el, option)

    @staticmethod
    def press(key: str) -> Action:
        return Action("press", None, key)

    @staticmethod
    def scroll(direction: str) -> Action:
        return Action("scroll", None, direction)

    @staticmethod
    def go_back() -> Action:
        return Action("go_back")

    @staticmethod
    def stop(answer: str = "") -> Action:
        return Action("stop", None, answer)


_ACTION_RE = re.compile(r"^\s*([a-z_]+)\((.*)\)\s*$", re.S)


def parse_action(text: str) -> Action:
    """Parse the text form; raises ActionParseError naming the problem."""
    m = _ACTION_RE.match(text)
    if not m:
        raise ActionParseError(f'not an action: {text!r} (expected e.g. click(3) or type(5, "hi"))')
    kind, rest = m.group(1), m.group(2).strip()
    element = None
    arg = None
    if rest:
        em = re.match(r"^(\d+)\s*(?:,\s*(.*))?$", rest, re.S)
        if em:
            element = int(em.group(1))
            rest = (em.group(2) or "").strip()
        if rest:
            try:
                arg = json.loads(rest)
            except json.JSONDecodeError as e:
                raise ActionParseError(f"bad string argument in {text!r}: {e}") from None
            if not isinstance(arg, str):
                raise ActionParseError(f"argument must be a string in {text!r}")
    if kind == "stop" and arg is None:
        arg = ""
    return Action(kind, element, arg)


@dataclass
class Observation:
    instruction: str
    url: str
    tree: str
    focused: int | None = None
    last_action_error: str = ""
    next_id: int = 1
    element_ids: list = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)

    @staticmethod
    def from_dict(d: dict) -> Observation:
        return Observation(
            instruction=str(d["instruction"]),
            url=str(d.get("url", "")),
            tree=str(d["tree"]),
            focused=d.get("focused"),
            last_action_error=str(d.get("last_action_error", "")),
            next_id=int(d.get("next_id", 1)),
            element_ids=list(d.get("element_ids") or ids_in_tree(str(d["tree"]))),
        )

    def render(self) -> str:
        """The observation as the models read it (one format, documented here)."""
        parts = [f"Task: {self.instruction}", "Page:", self.tree]
        if self.focused is not None:
            parts.append(f"Focused: [{self.focused}]")
        if self.last_action_error:
            parts.append(f"Error: {self.last_action_error}")
        return "\n".join(parts)


_ID_RE = re.compile(r"^\s*\[(\d+)\]", re.M)


def ids_in_tree(tree: str) -> list[int]:
    return [int(x) for x in _ID_RE.findall(tree)]
