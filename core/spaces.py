"""Observation and action spaces shared by the live and the dream environment.

Action text form (what the policy writes, what records carry)::

    click(3)
    type(5, "hello world")
    select(7, "Option B")
    press("Enter")
    press("Control+a")          # a chord: Control/Shift/Alt/Meta + a key
    hover(3)
    click_at(3, 12, 40)         # x, y in CSS pixels from the element box's top-left
    drag(3, 8)                  # drag element 3 and drop it on element 8's centre
    drag(3, 8, 5, 60)           # ... at x, y in element 8's box
    select_text(4, "some words")  # select that substring of element 4's text
    scroll("down")
    go_back()
    stop("answer")

Strings are JSON string literals, so any text round-trips exactly; ids and positions are
integers.  A wrong argument list raises ``ActionParseError`` naming the usage.
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

ACTION_KINDS = (
    "click",
    "type",
    "select",
    "press",
    "scroll",
    "go_back",
    "stop",
    "hover",
    "click_at",
    "drag",
    "select_text",
)
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
MODIFIERS = ("Control", "Shift", "Alt", "Meta")
MAX_COORD = 4000  # |x|, |y| of a position relative to an element's box, in CSS pixels

# kind -> the argument lists it takes: (element ids, numbers after them, text)
#   element ids: 0, 1 (the element) or 2 (the element, then a target element: drag)
#   numbers: 0 or 2 (x, y relative to the top-left of the last element's box)
#   text: "req" (a JSON string), "opt" (stop), "no"
_SIGNATURES: dict[str, tuple[tuple[int, int, str], ...]] = {
    "click": ((1, 0, "no"),),
    "type": ((1, 0, "req"),),
    "select": ((1, 0, "req"),),
    "press": ((0, 0, "req"),),
    "scroll": ((0, 0, "req"),),
    "go_back": ((0, 0, "no"),),
    "stop": ((0, 0, "opt"),),
    "hover": ((1, 0, "no"),),
    "click_at": ((1, 2, "no"),),
    "drag": ((2, 0, "no"), (2, 2, "no")),
    "select_text": ((1, 0, "req"),),
}
_USAGE = {
    "click": "click(3)",
    "type": 'type(5, "text")',
    "select": 'select(7, "Option")',
    "press": 'press("Enter") or press("Control+a")',
    "scroll": 'scroll("down")',
    "go_back": "go_back()",
    "stop": 'stop("answer")',
    "hover": "hover(3)",
    "click_at": "click_at(3, x, y) (x, y from the element's top-left)",
    "drag": "drag(3, 8) or drag(3, 8, x, y) (drop on element 8, at x, y in its box)",
    "select_text": 'select_text(4, "words to select")',
}
ELEMENT_KINDS = tuple(k for k, sigs in _SIGNATURES.items() if sigs[0][0] >= 1)


def key_error(key: str) -> str:
    """'' when ``key`` is a key Playwright's ``keyboard.press`` takes here: a known key, one
    character, or a chord ``Modifier+...+key`` (``Control+a``, ``Shift+ArrowDown``)."""
    if key in KEYS or key in EXTRA_KEYS or len(key) == 1:
        return ""
    if key.endswith("++"):  # "Control++": the '+' key itself
        mods, last = key[:-2].split("+"), "+"
    else:
        *mods, last = key.split("+")
    bad = [m for m in mods if m not in MODIFIERS]
    if mods and not bad and len(set(mods)) == len(mods) and key_error(last) == "":
        return ""
    return (
        f"unknown key {key!r}; known: {', '.join(KEYS + EXTRA_KEYS)}, one character,"
        f' or a chord of {"/".join(MODIFIERS)} + a key (e.g. "Control+a")'
    )


def precheck_error(action: Action, ids) -> str:
    """The error an action gets before it touches the page ('' when it may run): an element id
    that is not on the page, or an unknown key.  The live environment and dreams share it, so a
    dreamed page carries the same ``Error:`` line a live page would."""
    if action.kind in ELEMENT_KINDS and action.element not in ids:
        return f"element [{action.element}] is not on the page"
    if action.kind == "drag" and action.target not in ids:
        return f"drag target [{action.target}] is not on the page"
    if action.kind == "press":
        return key_error(action.text or "")
    return ""


class ActionParseError(ValueError):
    pass


@dataclass(frozen=True)
class Action:
    """One action.  ``element``: the element acted on; ``target``: the element a ``drag`` drops
    on; ``x``, ``y``: a position in CSS pixels from the top-left corner of the box of the last
    element named (``click_at``'s element, ``drag``'s target; a drag without them drops on the
    target's centre); ``text``: the string argument."""

    kind: str
    element: int | None = None
    text: str | None = None
    target: int | None = None
    x: int | None = None
    y: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in ACTION_KINDS:
            raise ActionParseError(
                f"unknown action kind {self.kind!r}; known: {', '.join(ACTION_KINDS)}"
            )
        n_ids = (self.element is not None) + (self.target is not None)
        n_num = (self.x is not None) + (self.y is not None)
        has_text = self.text is not None
        for ids, nums, text in _SIGNATURES[self.kind]:
            if (
                n_ids == ids
                and (ids < 2 or self.element is not None)
                and n_num == nums
                and (text == "opt" or has_text == (text == "req"))
            ):
                break
        else:
            raise ActionParseError(self._shape_error(n_ids, n_num, has_text))
        for v in (self.element, self.target, self.x, self.y):
            if v is not None and (not isinstance(v, int) or isinstance(v, bool)):
                raise ActionParseError(f"{self.kind}: ids and positions are integers, got {v!r}")
        if self.x is not None and max(abs(self.x), abs(self.y or 0)) > MAX_COORD:
            raise ActionParseError(
                f"{self.kind}: position ({self.x}, {self.y}) is out of range"
                f" (|x|, |y| <= {MAX_COORD})"
            )
        if self.kind == "scroll" and self.text not in SCROLL_DIRECTIONS:
            raise ActionParseError(
                f"scroll direction must be one of {SCROLL_DIRECTIONS}, got {self.text!r}"
            )
        if self.kind in ("select_text", "press") and self.text == "":
            raise ActionParseError(
                f"{self.kind} needs a non-empty text; usage: {_USAGE[self.kind]}"
            )

    def _shape_error(self, n_ids: int, n_num: int, has_text: bool) -> str:
        ids, nums, text = _SIGNATURES[self.kind][0]
        usage = f"; usage: {_USAGE[self.kind]}"
        if ids and self.element is None:
            return f"{self.kind} needs an element id{usage}"
        if ids == 2 and self.target is None:
            return f"{self.kind} needs a target element id{usage}"
        if n_ids > ids:
            return f"{self.kind} takes {'no element id' if not ids else 'fewer element ids'}{usage}"
        if n_num and not any(s[1] for s in _SIGNATURES[self.kind]):
            return f"{self.kind} takes no position{usage}"
        if n_num != nums and all(s[1] != n_num for s in _SIGNATURES[self.kind]):
            return f"{self.kind} needs a position x, y{usage}"
        if text == "req" and not has_text:
            return f"{self.kind} needs a text argument{usage}"
        return f"{self.kind} takes no text argument{usage}"

    def to_text(self) -> str:
        args = [str(v) for v in (self.element, self.target, self.x, self.y) if v is not None]
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

    @staticmethod
    def hover(el: int) -> Action:
        return Action("hover", el)

    @staticmethod
    def click_at(el: int, x: int, y: int) -> Action:
        return Action("click_at", el, x=x, y=y)

    @staticmethod
    def drag(el: int, target: int, x: int | None = None, y: int | None = None) -> Action:
        return Action("drag", el, target=target, x=x, y=y)

    @staticmethod
    def select_text(el: int, text: str) -> Action:
        return Action("select_text", el, text)


_ACTION_RE = re.compile(r"^\s*([a-z_]+)\((.*)\)\s*$", re.S)
_INT_ARG = re.compile(r"^(-?\d+)\s*(?:,\s*(.*))?$", re.S)


def parse_action(text: str) -> Action:
    """Parse the text form; raises ActionParseError naming the problem."""
    m = _ACTION_RE.match(text)
    if not m:
        raise ActionParseError(f'not an action: {text!r} (expected e.g. click(3) or type(5, "hi"))')
    kind, rest = m.group(1), m.group(2).strip()
    if kind not in ACTION_KINDS:
        raise ActionParseError(f"unknown action kind {kind!r}; known: {', '.join(ACTION_KINDS)}")
    nums: list[int] = []
    arg = None
    while rest:
        em = _INT_ARG.match(rest)
        if not em:
            break
        nums.append(int(em.group(1)))
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
    n_ids = _SIGNATURES[kind][0][0]
    if len(nums) > n_ids + 2 or (len(nums) > n_ids and kind not in ("click_at", "drag")):
        raise ActionParseError(f"too many numbers in {text!r}; usage: {_USAGE[kind]}")
    ids, pos = nums[:n_ids], nums[n_ids:]
    if len(pos) == 1:
        raise ActionParseError(f"{kind} needs both x and y in {text!r}; usage: {_USAGE[kind]}")
    return Action(
        kind,
        ids[0] if ids else None,
        arg,
        target=ids[1] if len(ids) > 1 else None,
        x=pos[0] if pos else None,
        y=pos[1] if pos else None,
    )


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
