"""The task format: ``AppTask``, declared in a data file, checks and resets in data or Python.

A task file (YAML or JSON) names the application and lists tasks::

    app: shop
    tasks:
      - name: price-of                        # registered as shop/price-of
        kind: info                            # info | navigation | search | form | flow | admin
        start: /catalogue/                    # a path on the app (a template too: "{product.url}")
        draw: {product: products}             # one item of the app's data list "products"
        instruction: What is the price of {product.title}? Submit the number as your answer.
        check: {answer: "{product.price}"}   # the success check (below)
        max_steps: 12
      - name: rename-product
        kind: admin
        login: staff                          # the reset logs the context in (no password typed)
        draw: mymodule:draw_rename            # Python: fn(rng, data, code) -> params
        reset: mymodule:reset_rename          # Python: [async] fn(episode)
        check: mymodule:check_rename          # Python: [async] fn(episode) -> (ok, reason)

Templates are ``str.format`` templates over the drawn parameters (``{product.title}`` reads a
dict key with a dot).  Declarative checks (all listed must hold):

* ``answer: TEMPLATE`` - the answer the agent submitted on the app's answer page (the app's
  ``state``), compared after trimming, case-folding and dropping a leading currency sign;
* ``url: TEMPLATE`` - the final page's path (query string ignored) equals it;
* ``basket: {TEMPLATE_UPC: QUANTITY}`` - the context's basket holds exactly these lines;
* ``page_contains: TEMPLATE`` - the final observation's text contains it.

An episode ends when the agent says ``stop`` (then it is judged: reward 1 on success, else 0) or
after ``max_steps`` (truncated, reward 0).  The draw is seeded by (task name, seed): the same
seed always gives the same instruction.
"""

from __future__ import annotations

import importlib
import inspect
import json
import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

KINDS = ("info", "navigation", "search", "form", "flow", "admin")


class _Dotted(dict):
    """A dict whose keys read as attributes in format templates (``{product.title}``)."""

    def __getattr__(self, k: str) -> Any:
        try:
            v = self[k]
        except KeyError as e:
            raise AttributeError(k) from e
        return _Dotted(v) if isinstance(v, dict) and not isinstance(v, _Dotted) else v


def fill(template: str, params: dict) -> str:
    """``template`` with ``{name}`` / ``{name.key}`` replaced from ``params``."""
    return template.format(
        **{k: _Dotted(v) if isinstance(v, dict) else v for k, v in params.items()}
    )


def resolve(ref: Any) -> Any:
    """``"package.module:function"`` -> the function; anything else as it is."""
    if isinstance(ref, str) and re.fullmatch(r"[\w.]+:\w+", ref):
        mod, fn = ref.split(":")
        return getattr(importlib.import_module(mod), fn)
    return ref


async def call(fn: Callable, *args: Any) -> Any:
    """Call a hook that may be sync or async."""
    out = fn(*args)
    return await out if inspect.isawaitable(out) else out


@dataclass(frozen=True)
class AppTask:
    name: str  # "<suite>/<task>"
    app: str  # the application's registered name
    instruction: str
    start: str = "/"
    kind: str = ""
    draw: Any = field(default_factory=dict)  # {param: data list name} or fn(rng, data, code)
    check: Any = field(default_factory=dict)  # declarative dict or fn(episode) -> (ok, reason)
    reset: Any = None  # None or fn(episode)
    login: str | None = None  # None, "customer" or "staff"
    max_steps: int = 15
    time_limit_ms: int = 120_000
    # the page tree's budget in tokens of the model's tokenizer (collectors.webapps.prune);
    # 0 = the collector's ``collector.app_obs_tokens``
    obs_budget: int = 0
    origins: tuple = ()  # origins besides the app's own the task may reach
    expert: Any = None  # collectors.experts.Expert or None
    note: str = ""

    def params(self, seed: int, data: dict, code: str) -> dict:
        """The episode's drawn parameters (seeded by task name and seed)."""
        rng = random.Random(f"{self.name}#{seed}")
        draw = resolve(self.draw)
        if callable(draw):
            out = dict(draw(rng, data, code))
        else:
            out = {}
            for key, source in dict(draw).items():
                items = data[source]
                out[key] = items[rng.randrange(len(items))]
        out.setdefault("code", code)
        return out


def load_tasks(path: str | Path, experts: dict | None = None) -> list[AppTask]:
    """The tasks of a YAML/JSON task file (see the module docstring)."""
    p = Path(path)
    text = p.read_text()
    if p.suffix == ".json":
        doc = json.loads(text)
    else:
        import yaml

        doc = yaml.safe_load(text)
    app = doc["app"]
    suite = doc.get("suite", app)
    out = []
    for t in doc["tasks"]:
        name = f"{suite}/{t['name']}"
        kind = t.get("kind", "")
        if kind and kind not in KINDS:
            raise ValueError(f"{name}: kind {kind!r} is not one of {', '.join(KINDS)}")
        unknown = set(t) - {
            "name", "kind", "start", "draw", "instruction", "check", "reset", "login",
            "max_steps", "time_limit_ms", "obs_budget", "origins", "note",
        }  # fmt: skip
        if unknown:
            raise ValueError(f"{name}: unknown field(s) {', '.join(sorted(unknown))}")
        out.append(
            AppTask(
                name=name,
                app=app,
                instruction=str(t["instruction"]).strip(),
                start=str(t.get("start", "/")),
                kind=kind,
                draw=t.get("draw") or {},
                check=t.get("check") or {},
                reset=t.get("reset"),
                login=t.get("login"),
                max_steps=int(t.get("max_steps", 15)),
                time_limit_ms=int(t.get("time_limit_ms", 120_000)),
                obs_budget=int(t.get("obs_budget", 0)),
                origins=tuple(t.get("origins") or ()),
                expert=(experts or {}).get(name),
                note=str(t.get("note", "")),
            )
        )
    return out


def normalise_answer(s: Any) -> str:
    s = str(s if s is not None else "").strip().casefold()
    s = re.sub(r"^[$£€]\s*", "", s)
    return re.sub(r"\s+", " ", s)
