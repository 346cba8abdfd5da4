"""Task registry: every web task the collectors can run, by suite.

A task is named ``<suite>/<task>`` (``miniwob/click-button``).  A suite is one
object with a ``name`` and a ``tasks()`` method returning ``TaskSpec``s; add
one with ``register_suite(MySuite())`` from its own module (the MiniWoB++
suite below is the model).  ``TaskSpec.url_path`` is relative to the task
server's base URL.

``solvable`` says whether our action space (click / type / select / press, key chords / scroll /
go_back / stop, hover / click_at / drag / select_text on element ids from a text tree with boxes
for SVG shapes and draggable elements) can solve the task; tasks that need reading colours or
pixels, free-hand curves or mouse moves to arbitrary positions are registered with
``solvable=False`` and a precise note (``MINIWOB_UNSOLVABLE``), so samplers can leave them out.
``has_expert`` comes from ``collectors.experts.EXPERTS``.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

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
    # a task on a real application (``collectors.webapps.taskdef.AppTask``): the environment then
    # takes the instruction, reset and reward from it instead of MiniWoB's page globals
    app_task: Any = None

    def url(self, base_url: str) -> str:
        return base_url.rstrip("/") + "/" + self.url_path.lstrip("/")


class Suite(Protocol):
    name: str

    def tasks(self) -> list[TaskSpec]: ...


# Tasks the action space cannot solve from the text observation, with why.  What the text
# observation carries: the DOM text and states, boxes of SVG/canvas elements, SVG shapes (by tag)
# and draggable elements; not colours, not pixels of a canvas, not CSS transforms.  The actions
# act on elements (a position is relative to an element's box), and a drag moves in a straight
# line.
_FILL = "names a colour in about half the episodes; shapes' fill colours are not in the observation"
MINIWOB_UNSOLVABLE: dict[str, str] = {
    "click-color": "the boxes differ only by background colour (style), not in the observation",
    "click-shades": "the tiles differ only by shade of colour (style), not in the observation",
    "click-shape": "the description " + _FILL,
    "count-shape": "the question " + _FILL,
    "drag-shapes-2": "the instruction " + _FILL,
    "count-sides": "the polygon is drawn on a canvas (pixels)",
    "visual-addition": "the numbers are rows of empty styled blocks to count; the text observation "
    "keeps no line for an element with no text, state or handler",
    "number-checkboxes": "the digits are drawn by the layout of the checkboxes (pixels)",
    "simon-says": "the sequence is shown as colour flashes (pixels over time)",
    "hover-shape": "the square to hover is marked only by its colour class",
    "use-colorwheel-2": "the colour to pick is shown as a swatch (style colour, not text)",
    "drag-cube": "the face shown depends on the cube's 3-D CSS rotation (not in the observation)",
    "draw-circle": "needs a free-hand curve; drag moves in a straight line",
    "resize-textarea": "needs grabbing the textarea's resize corner; a drag starts on an "
    "uncovered point of the element, and the corner handle is no element",
    "hot-cold": "needs mouse moves to arbitrary positions guided by hot/cold feedback; hover takes "
    "an element",
}

# Tasks whose page must be loaded again for every episode: restarting the episode on the loaded
# page leaves the previous episode's widget behind (wheelnav's pie menu keeps the old wheel: a
# click on the new one's slices then does nothing).
MINIWOB_RELOAD = frozenset({"click-pie", "click-pie-nodelay"})

# App suites registered with MiniWoB's (modules with a ``register()``; collectors.webapps)
BUILTIN_APP_SUITES = ("collectors.webapps.oscar.suite",)

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
                    f"miniwob/{t}",
                    f"miniwob/{f.name}",
                    self.name,
                    solvable=not note,
                    note=note,
                    reload_each_episode=t in MINIWOB_RELOAD,
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
        has = name in EXPERTS or getattr(spec.app_task, "expert", None) is not None
        if spec.has_expert != has:
            _REGISTRY[name] = replace(spec, has_expert=has)


def _ensure() -> None:
    if "miniwob" not in _SUITES:
        register_suite(MiniWoBSuite())
        for ref in BUILTIN_APP_SUITES:  # imported by name: the app suites import this module
            importlib.import_module(ref).register()
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


def app_expert(name: str) -> Any:
    """The scripted expert of an app task (``AppTask.expert``), or None."""
    try:
        spec = get_task(name)
    except KeyError:
        return None
    return getattr(spec.app_task, "expert", None)


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
        if n in ("*experts*", "experts"):  # MiniWoB++'s (app suites: name them, ``shop/*``)
            out += list_tasks(suite="miniwob", has_expert=True)
        elif n in ("*solvable*", "solvable"):
            out += list_tasks(suite="miniwob", solvable=True)
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


# the tasks ``dynaweb bench collect`` times (and its per-step cost probe)
COLLECT_BENCH_TASKS = (
    "miniwob/login-user",
    "miniwob/enter-password",
    "miniwob/click-checkboxes",
    "miniwob/enter-text",
    "miniwob/click-button-sequence",
)
