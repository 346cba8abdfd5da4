"""The page tree's text form, read back into nodes: the one reader of ``Observation.tree``.

An observation's tree is one element per line (``collectors.observation`` renders it)::

    [3] textbox "Name" value="say \\"hi\\"" required
      option "B" selected

two spaces of indentation per level, ``[id] `` when the element can be acted on, the role, its
name as a JSON string, then properties (``key`` or ``key="json string"``).  ``parse_tree`` turns
that text back into ``Node``s linked to their parents and children; the scripted experts, the
random policy and the policy's candidate enumeration (``models.policy.candidates``) all read pages
through it, so they agree on what a page holds.

Two readings:

* the default reads the lines of the rendered form (``str.splitlines``) and skips any other
  line (the ``... (N more lines)`` marker of a cut tree); ``Node.index`` counts the nodes.
* ``loose=True`` reads every ``\\n``-separated line, whatever it looks like (a dreamed page is
  model output and need not follow the rendered form): the leading white space gives the depth
  (``len // 2``), an optional ``[id]``, the first word is the role (lower-cased; "" on a blank
  line), the name is the JSON string that opens the rest; properties are read after it as far
  as they follow the rendered form (``box``: what the candidate enumeration needs).
  ``Node.index`` is then the line number.  This is what the policy's candidate enumeration
  reads, so that it accepts whatever the world model writes.

``find`` / ``first`` / ``descendants`` / ``ancestors`` query a node list.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field

_LINE_RE = re.compile(r"^(?P<ind>(?:  )*)(?:\[(?P<id>\d+)\] )?(?P<role>[A-Za-z_-]+)(?P<rest>.*)$")
_LOOSE_LINE_RE = re.compile(r"^(?P<ind>\s*)(?:\[(?P<id>\d+)\]\s*)?(?P<role>\S*)\s*(?P<rest>.*)$")
_QUOTED = re.compile(r'"((?:[^"\\]|\\.)*)"')
_DEC = json.JSONDecoder()
_BOX = re.compile(r"^\s*(-?\d+),\s*(-?\d+),\s*(\d+),\s*(\d+)\s*$")

TEXTBOX = ("textbox", "searchbox", "spinbutton")
CLICKABLE_TEXT = ("text", "link", "generic", "listitem", "cell", "treeitem", "menuitem")


@dataclass
class Node:
    index: int
    depth: int
    id: int | None
    role: str
    name: str = ""
    props: dict = field(default_factory=dict)
    parent: int | None = None
    children: list = field(default_factory=list)

    def has(self, prop: str) -> bool:
        return prop in self.props

    @property
    def value(self) -> str:
        return self.props.get("value") or ""

    @property
    def box(self) -> tuple[int, int, int, int] | None:
        """``box="x,y,w,h"`` (viewport CSS pixels) as four ints; None when absent or malformed."""
        return parse_box(self.props.get("box"))

    @property
    def classes(self) -> list[str]:
        return (self.props.get("class") or "").split()

    @property
    def blank(self) -> bool:
        """A line with nothing on it (only a ``loose`` reading keeps such lines)."""
        return self.id is None and not self.role


def parse_box(value: object) -> tuple[int, int, int, int] | None:
    """A ``box`` property value ``"x,y,w,h"`` as four ints (None when it is not one)."""
    m = _BOX.match(value) if isinstance(value, str) else None
    return (int(m[1]), int(m[2]), int(m[3]), int(m[4])) if m else None


def parse_tree(tree: str, loose: bool = False) -> list[Node]:
    """Parse the observation text form back into nodes (with parent/children links).

    ``loose``: every ``\\n``-separated line is a node, read leniently (see the module doc)."""
    nodes: list[Node] = []
    stack: list[Node] = []
    for line in tree.split("\n") if loose else tree.splitlines():
        n = _loose_node(line, len(nodes)) if loose else _node(line, len(nodes))
        if n is None:
            continue
        while stack and stack[-1].depth >= n.depth:
            stack.pop()
        if stack:
            n.parent = stack[-1].index
            stack[-1].children.append(n.index)
        stack.append(n)
        nodes.append(n)
    return nodes


def _node(line: str, index: int) -> Node | None:
    """One line of the rendered form (None if the line is not one)."""
    m = _LINE_RE.match(line)
    if not m:
        return None
    rest = m.group("rest")
    name = ""
    i = 0
    if rest.startswith(' "'):
        try:
            name, end = _DEC.raw_decode(rest, 1)
            i = end
        except ValueError:
            i = len(rest)
    return Node(
        index,
        len(m.group("ind")) // 2,
        int(m.group("id")) if m.group("id") else None,
        m.group("role"),
        name,
        _props(rest, i),
    )


def _props(rest: str, i: int) -> dict:
    """``key`` / ``key="json string"`` properties from position ``i`` of a line's rest."""
    props: dict = {}
    while i < len(rest):
        if rest[i] == " ":
            i += 1
            continue
        km = re.match(r"([A-Za-z_-]+)", rest[i:])
        if not km:
            break
        key = km.group(1)
        i += len(key)
        val = None
        if rest[i : i + 2] == '="':
            try:
                val, end = _DEC.raw_decode(rest, i + 1)
                i = end
            except ValueError:
                break
        props[key] = val
    return props


def _loose_node(line: str, index: int) -> Node:
    """Any line, read leniently (always a node; see the module doc)."""
    m = _LOOSE_LINE_RE.match(line)
    assert m is not None  # every part of the pattern may be empty
    return Node(
        index,
        len(m.group("ind")) // 2,
        int(m.group("id")) if m.group("id") else None,
        m.group("role").lower(),
        _leading_name(m.group("rest")),
        _loose_props(m.group("rest")),
    )


def _loose_props(rest: str) -> dict:
    """The properties after a line's (optional) leading name; what does not read is skipped."""
    rest = rest.lstrip()
    q = _QUOTED.match(rest)
    return _props(" " + rest[q.end() :] if q else " " + rest, 0)


def _leading_name(rest: str) -> str:
    """The quoted name at the start of a line's rest ("" if none; kept raw if not valid JSON)."""
    q = _QUOTED.match(rest.lstrip())
    if not q:
        return ""
    try:
        return json.loads(f'"{q.group(1)}"')
    except json.JSONDecodeError:
        return q.group(1)


def find(
    nodes: list[Node],
    role: str | tuple | None = None,
    name: str | None = None,
    pred: Callable[[Node], bool] | None = None,
    with_id: bool = True,
) -> list[Node]:
    roles = (role,) if isinstance(role, str) else role
    out = []
    for n in nodes:
        if with_id and n.id is None:
            continue
        if roles is not None and n.role not in roles:
            continue
        if name is not None and n.name != name:
            continue
        if pred is not None and not pred(n):
            continue
        out.append(n)
    return out


def first(nodes: list[Node], **kw) -> Node | None:
    r = find(nodes, **kw)
    return r[0] if r else None


def descendants(nodes: list[Node], n: Node) -> list[Node]:
    out = []
    for i in range(n.index + 1, len(nodes)):
        if nodes[i].depth <= n.depth:
            break
        out.append(nodes[i])
    return out


def ancestors(nodes: list[Node], n: Node) -> list[Node]:
    out = []
    while n.parent is not None:
        n = nodes[n.parent]
        out.append(n)
    return out
