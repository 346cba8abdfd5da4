"""The world model's change proposals, and the head that picks one (``decode="head"``).

``proposals(obs, action)``: the next pages an action could plausibly produce, each with its
*kind*: the unchanged page (``same``), the empty page (``empty``: the episode's page is gone),
and for an action on element ``k``: line ``k`` with ``checked`` / ``selected`` / ``expanded``
toggled, with ``value="<text>"`` (type/select; ``value``), for select the ``selected`` mark moved
to the chosen option below it as well (``option``), for a click on a ``tab`` that tab ``expanded
selected`` and the others ``collapsed`` (``tab``), for a drag the item moved (``drag``,
``models.world_model.mouse``).  ``candidate_trees`` is their deduplicated pages (``decode="rerank"``).

The **change head** (``change_head``: d_model -> ``len(KINDS)``, on the same input as the
reward/done heads, ``models.world_model.model.WorldModel.head_input``) is a classifier over these kinds plus
``other`` (no proposal is the real next page).  Its training label (``change_label``) is the first
kind, in ``KINDS`` order, whose page equals the real next page; it is trained with plain
cross-entropy (``models.world_model.loss``).  To predict (``choose``), the most likely kind among those
the page and action offer, or ``other``: then the world model's own text decides (greedy).  So
an output chosen by the head always applies, and the head decides *which* change; the edit it
names is exact by construction, where the 2-layer model's generated text must copy typed strings
token by token (measured: 1.8 % of changed pages exactly right, greedy, after 5,000 steps).
"""

from __future__ import annotations

import re

import torch

from core.spaces import Action, Observation
from models.world_model.change import line_id
from models.world_model.mouse import drag_trees

KINDS = (
    "same",
    "empty",
    "checked",
    "selected",
    "expanded",
    "value",
    "option",
    "tab",
    "drag",
    "other",
)
OTHER = KINDS.index("other")

_VALUE = re.compile(r' value="(?:[^"\\]|\\.)*"')


def _set_value(line: str, value: str) -> str:
    """``value="..."`` set on the line (replaced, or placed before ``type="..."`` / at the end)."""
    v = ' value="' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if _VALUE.search(line):
        return _VALUE.sub(lambda _m: v, line, count=1)
    k = line.find(' type="')
    return line[:k] + v + line[k:] if k >= 0 else line + v


def _select_tab(lines: list[str], idx: int) -> list[str]:
    """A tab click: the other ``expanded selected`` tabs become ``collapsed``, this one the reverse."""
    new = list(lines)
    for j, x in enumerate(lines):
        if " tab " in f" {x.strip()} " and x.strip().split(" ", 2)[1:2] == ["tab"]:
            bare = x.replace(" expanded selected", "").replace(" collapsed", "")
            new[j] = bare + (
                " expanded selected" if j == idx else (" collapsed" if bare != x else "")
            )
    return new


def _toggle(line: str, prop: str) -> str:
    return line.replace(" " + prop, "", 1) if (" " + prop) in line else line + " " + prop


def _select_option(lines: list[str], idx: int, text: str) -> list[str]:
    new = list(lines)
    new[idx] = _set_value(lines[idx], text)
    for j in range(idx + 1, len(lines)):
        if line_id(lines[j]) is not None:
            break
        body = lines[j].strip()
        if body.startswith("option "):
            bare = lines[j].replace(" selected", "")
            new[j] = bare + " selected" if body.startswith(f'option "{text}"') else bare
    return new


def proposals(obs: Observation, action: Action | None) -> list[tuple[str, str]]:
    """(kind, next page) pairs in ``KINDS`` order (a kind at most once; pages may repeat)."""
    out = [("same", obs.tree), ("empty", "")]
    lines = obs.tree.split("\n")
    if action is not None and action.element is not None:
        idx = next((i for i, x in enumerate(lines) if line_id(x) == action.element), None)
        if idx is not None:
            line = lines[idx]

            def put(v: str) -> str:
                return "\n".join(lines[:idx] + [v] + lines[idx + 1 :])

            out += [(p, put(_toggle(line, p))) for p in ("checked", "selected", "expanded")]
            if action.kind in ("type", "select") and action.text is not None:
                out.append(("value", put(_set_value(line, action.text))))
            if action.kind == "select" and action.text is not None:
                out.append(("option", "\n".join(_select_option(lines, idx, action.text))))
            if action.kind == "click" and line.strip().split(" ", 2)[1:2] == ["tab"]:
                out.append(("tab", "\n".join(_select_tab(lines, idx))))
        out += [("drag", t) for t in drag_trees(lines, action)[:1]]
    return out


def candidate_trees(obs: Observation, action: Action | None) -> list[str]:
    """The proposals' pages, deduplicated, in order (``decode="rerank"`` scores them)."""
    out = [t for _k, t in proposals(obs, action)]
    if action is not None and action.element is not None:
        out += drag_trees(obs.tree.split("\n"), action)[1:]
    return list(dict.fromkeys(out))


def change_label(obs: Observation, action: Action | None, real_next_tree: str) -> int:
    """The change head's target: the index in ``KINDS`` of the first proposal that is the real next
    page, else ``OTHER``."""
    for kind, tree in proposals(obs, action):
        if tree == real_next_tree:
            return KINDS.index(kind)
    return OTHER


def choose(logits: torch.Tensor, obs_list: list[Observation], actions: list) -> list[str | None]:
    """Per row, the page of the most likely kind the row offers, or None for ``other`` (the text
    decides).  ``logits``: the change head's, (B, len(KINDS)) (``WorldModel.head_logits``)."""
    out: list[str | None] = []
    for b, (obs, act) in enumerate(zip(obs_list, actions, strict=True)):
        offered = dict(proposals(obs, act if isinstance(act, Action) else None))
        allowed = [KINDS.index(k) for k in offered] + [OTHER]
        best = max(allowed, key=lambda i: float(logits[b, i]))
        out.append(None if best == OTHER else offered[KINDS[best]])
    return out
