"""Task registry: every web task the collectors can run, by suite.

A task is named ``<suite>/<task>`` (``miniwob/click-button``).  A suite is one
object with a ``name`` and a ``tasks()`` method returning ``TaskSpec``s; add
one with ``register_suite(MySuite())`` from its own module (the MiniWoB++
suite below is the model).  ``TaskSpec.url_path`` is relative to the task
server's base URL.

``solvable`` says whether our action space (click / type / select / press /
scroll / go_back / stop on element ids from a text tree) can solve the task;
tasks that need dragging, drawing, pixel coordinates, hovering, text
selection or reading colours/shapes are registered with ``solvable=False`` and
a note, so samplers can leave them out.  ``has_expert`` comes from
``collectors.experts.EXPERTS``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

from collectors.experts import EXPERTS


@dataclass(frozen=True)
class TaskSpec:
    name: str
    url_path: str
    suite: str
    solvable: bool = True
    has_expert: bool = False
    note: str = ""
    reload_each_episode: bool = False  # True: never restart an episode on the loaded page

    def url(self, base_url: str) -> str:
        return base_url.rstrip("/") + "/" + self.url_path.lstrip("/")


class Suite(Protocol):
    name: str

    def tasks(self) -> list[TaskSpec]: ...


# Tasks the action space cannot solve from the text observation, with why.
_DRAG = "needs drag-and-drop (no drag action)"
_COORD = "needs clicks at pixel coordinates inside an SVG/canvas"
_VISUAL = "needs reading shapes/colours that the text tree does not carry"
MINIWOB_UNSOLVABLE: dict[str, str] = {
    "bisect-angle": _COORD,
    "chase-circle": _COORD,
    "circle-center": _COORD,
    "find-midpoint": _COORD,
    "grid-coordinate": _COORD,
    "right-angle": _COORD,
    "hot-cold": "needs mouse moves/clicks at coordinates",
    "moving-items": _COORD,
    "ascending-numbers": _COORD,
    "click-shape": _COORD,
    "click-pie": _COORD + " (SVG pie menu)",
    "click-pie-nodelay": _COORD + " (SVG pie menu)",
    "count-shape": _VISUAL,
    "count-sides": _VISUAL,
    "identify-shape": _VISUAL,
    "click-color": _VISUAL,
    "click-shades": _VISUAL,
    "visual-addition": _VISUAL,
    "number-checkboxes": "needs reading digit shapes drawn by checkbox layout",
    "simon-says": "needs watching colour flashes",
    "stock-market": "reads an SVG chart over time",
    "hover-shape": "needs mouse hover (no hover action)",
    "drag-box": _DRAG,
    "drag-circle": _DRAG,
    "drag-cube": _DRAG,
    "drag-items": _DRAG,
    "drag-items-grid": _DRAG,
    "drag-shapes": _DRAG,
    "drag-shapes-2": _DRAG,
    "drag-single-shape": _DRAG,
    "drag-sort-numbers": _DRAG,
    "draw-circle": "needs free-hand drawing",
    "draw-line": "needs free-hand drawing",
    "highlight-text": "needs text selection",
    "highlight-text-2": "needs text selection",
    "text-editor": "needs text selection + formatting",
    "resize-textarea": "needs dragging the resize handle",
    "use-colorwheel": "needs a colour picker (canvas)",
    "use-colorwheel-2": "needs a colour picker (canvas)",
}

_REGISTRY: dict[str, TaskSpec] = {}
_SUITES: dict[str, Suite] = {}


def miniwob_html_dir() -> Path:
    import miniwob

    return Path(os.path.dirname(miniwob.__file__)) / "html"


class MiniWoBSuite:
    """The 130 MiniWoB++ tasks shipped by the ``miniwob`` package (scanned)."""

    name = "miniwob"

    def tasks(self) -> list[TaskSpec]:
        out = []
        for f in sorted((miniwob_html_dir() / "miniwob").glob("*.html")):
            t = f.stem
            note = MINIWOB_UNSOLVABLE.get(t, "")
            out.append(
                TaskSpec(
                    f"miniwob/{t}", f"miniwob/{f.name}", self.name, solvable=not note, note=note
                )
            )
        return out


def register_suite(suite: Suite, replace_existing: bool = False) -> list[TaskSpec]:
    """Register every task of ``suite``; returns them."""
    if suite.name in _SUITES and not replace_existing:
        return [t for t in _REGISTRY.values() if t.suite == suite.name]
    _SUITES[suite.name] = suite
    specs = suite.tasks()
    for s in specs:
        if s.name in _REGISTRY and not replace_existing:
            raise ValueError(f"task {s.name!r} is already registered")
        _REGISTRY[s.name] = s
    _mark_experts()
    return specs


def _mark_experts() -> None:
    for name, spec in list(_REGISTRY.items()):
        has = name in EXPERTS
        if spec.has_expert != has:
            _REGISTRY[name] = replace(spec, has_expert=has)


def _ensure() -> None:
    if "miniwob" not in _SUITES:
        register_suite(MiniWoBSuite())
    else:
        _mark_experts()


def get_task(name: str) -> TaskSpec:
    """Look a task up by ``suite/task`` (a bare MiniWoB name is accepted too)."""
    _ensure()
    if name in _REGISTRY:
        return _REGISTRY[name]
    if "/" not in name and f"miniwob/{name}" in _REGISTRY:
        return _REGISTRY[f"miniwob/{name}"]
    near = [n for n in _REGISTRY if name.split("/")[-1] in n][:5]
    raise KeyError(
        f"unknown task {name!r}" + (f"; did you mean: {', '.join(near)}" if near else "")
    )


def list_tasks(
    suite: str | None = None, solvable: bool | None = None, has_expert: bool | None = None
) -> list[TaskSpec]:
    _ensure()
    out = []
    for t in _REGISTRY.values():
        if suite is not None and t.suite != suite:
            continue
        if solvable is not None and t.solvable != solvable:
            continue
        if has_expert is not None and t.has_expert != has_expert:
            continue
        out.append(t)
    return sorted(out, key=lambda t: t.name)


def resolve_tasks(names: list[str]) -> list[TaskSpec]:
    """Expand a task list from config: names, ``suite/*``, ``*experts*`` or ``*solvable*``."""
    out: list[TaskSpec] = []
    for n in names:
        if n in ("*experts*", "experts"):
            out += list_tasks(has_expert=True)
        elif n in ("*solvable*", "solvable"):
            out += list_tasks(solvable=True)
        elif n.endswith("/*"):
            out += list_tasks(suite=n[:-2])
        else:
            out.append(get_task(n))
    seen, uniq = set(), []
    for t in out:
        if t.name not in seen:
            seen.add(t.name)
            uniq.append(t)
    return uniq
