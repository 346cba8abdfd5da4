"""The one way a config field is declared: a default, a help string (``dynaweb config
--describe`` prints them) and optional bounds (``ge``, ``gt``, ``le``, ``lt``); the type of a
value set from text (environment, ``--set``) or from a file, checked against the field's
annotation (``Literal`` choices and list element types included); and ``problems``, what
``validate()`` of a config reports: wrong types, values out of bounds, and the contradictions
between fields that a section's ``checks()`` names."""

from __future__ import annotations

import dataclasses
import functools
import json
import typing
from dataclasses import field
from typing import Any, Literal

BOUNDS = ("ge", "gt", "le", "lt")
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off", "")


def _f(
    default: Any,
    help: str,
    *,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    lt: float | None = None,
    **kw: Any,
) -> Any:
    """A field with its help string and bounds (each checked on the value, or on every element of
    a list value, by ``problems``)."""
    bounds = {k: v for k, v in (("ge", ge), ("gt", gt), ("le", le), ("lt", lt)) if v is not None}
    meta = {"help": help, **bounds}
    if isinstance(default, list | dict):
        return field(default_factory=lambda d=default: type(d)(d), metadata=meta, **kw)
    return field(default=default, metadata=meta, **kw)


@functools.cache
def hints(cls: type) -> dict[str, Any]:
    """The resolved annotations of dataclass ``cls`` (its bases' included)."""
    return typing.get_type_hints(cls)


def choices(cls: type, name: str) -> tuple | None:
    """The allowed values of field ``name`` of dataclass ``cls`` when it is a ``Literal``, else
    None."""
    hint = hints(cls).get(name)
    return typing.get_args(hint) if typing.get_origin(hint) is Literal else None


def _type_name(hint: Any) -> str:
    if typing.get_origin(hint) is list:
        (elem,) = typing.get_args(hint) or (Any,)
        return f"a list of {_type_name(elem)}"
    if typing.get_origin(hint) is Literal:
        return "one of " + ", ".join(map(repr, typing.get_args(hint)))
    return getattr(hint, "__name__", str(hint))


def check_value(value: Any, hint: Any, path: str) -> Any:
    """``value`` as a value of a field annotated ``hint`` (an int for a float field becomes a float,
    an integral float for an int field an int, a tuple for a list field a list); a ValueError
    naming ``path`` when it is of another type or not one of a ``Literal``'s choices."""
    origin = typing.get_origin(hint)
    if origin is Literal:
        allowed = typing.get_args(hint)
        if value not in allowed:
            raise ValueError(f"{path} = {value!r} is not one of {', '.join(map(repr, allowed))}")
        return value
    if origin is list:
        if not isinstance(value, list | tuple):
            raise ValueError(f"{path} = {value!r}: expected {_type_name(hint)}")
        (elem,) = typing.get_args(hint) or (Any,)
        return [check_value(v, elem, f"{path}[{i}]") for i, v in enumerate(value)]
    ok = True
    if hint is bool:
        ok = isinstance(value, bool)
    elif hint is int:
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif hint is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        value = float(value) if ok else value
    elif hint is str:
        ok = isinstance(value, str)
    elif isinstance(hint, type) and dataclasses.is_dataclass(hint):
        raise ValueError(f"{path} is a section: set its fields ({path}.FIELD)")
    if not ok:
        raise ValueError(f"{path} = {value!r}: expected {_type_name(hint)}")
    return value


def coerce(text: str, hint: Any, path: str) -> Any:
    """The value a field annotated ``hint`` gets from ``text`` (an environment variable, ``--set``):
    ``true``/``false`` (``1``/``0``, ``yes``/``no``, ``on``/``off``) for a bool, a number, or for a
    list JSON (``[0, 1]``) or comma-separated items, bracketed or not (``a,b``, ``[a,b]``: each
    read as the element type)."""
    origin = typing.get_origin(hint)
    s = text.strip()
    try:
        if hint is bool:
            if s.lower() not in _TRUE + _FALSE:
                raise ValueError
            value: Any = s.lower() in _TRUE
        elif hint is int:
            value = int(s)
        elif hint is float:
            value = float(s)
        elif origin is list:
            (elem,) = typing.get_args(hint) or (Any,)
            value = None
            if s.startswith("["):
                try:
                    value = json.loads(s)
                except ValueError:
                    if not s.endswith("]"):
                        raise
                    s = s[1:-1]  # a bracketed list of bare items: [a,b]
            if value is None:
                items = [x for x in (p.strip() for p in s.split(",")) if x]
                value = [coerce(x, elem, f"{path}[{i}]") for i, x in enumerate(items)]
        else:
            value = text
    except ValueError as e:  # json.JSONDecodeError is one
        if str(e).startswith(path):
            raise
        raise ValueError(f"{path} = {text!r}: expected {_type_name(hint)}") from None
    return check_value(value, hint, path)


def _bound_problem(key: str, value: Any, meta: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    ge, gt, le, lt = (meta.get(b) for b in BOUNDS)
    ok = (
        (ge is None or value >= ge)
        and (gt is None or value > gt)
        and (le is None or value <= le)
        and (lt is None or value < lt)
    )
    if ok:
        return None
    lo = f"[{ge}" if ge is not None else f"({gt}" if gt is not None else None
    hi = f"{le}]" if le is not None else f"{lt})" if lt is not None else None
    if lo and hi:
        want = f"in {lo}, {hi}"
    elif lo:
        want = f"{'>=' if ge is not None else '>'} {lo[1:]}"
    else:
        want = f"{'<=' if le is not None else '<'} {hi[:-1]}"
    return f"{key} = {value!r} must be {want}"


def problems(obj: Any, prefix: str = "") -> list[str]:
    """What is wrong with dataclass ``obj`` and its sections: values of the wrong type, out of
    their field's bounds, and the contradictions its ``checks()`` (``[(field, message)]``) names;
    each message starts with the key (``prefix`` + field)."""
    out: list[str] = []
    types = hints(type(obj))
    for f in dataclasses.fields(obj):
        value, key = getattr(obj, f.name), prefix + f.name
        if dataclasses.is_dataclass(value):
            out += problems(value, key + ".")
            continue
        try:
            check_value(value, types[f.name], key)
        except ValueError as e:
            out.append(str(e))
            continue
        items = value if isinstance(value, list) else [value]
        for i, v in enumerate(items):
            p = _bound_problem(f"{key}[{i}]" if isinstance(value, list) else key, v, f.metadata)
            if p:
                out.append(p)
    checks = getattr(obj, "checks", None)
    if callable(checks):
        out += [f"{prefix}{k}: {msg}" for k, msg in checks()]
    return out


def raise_problems(obj: Any, prefix: str = "") -> None:
    """ValueError listing ``problems(obj, prefix)``, if any."""
    found = problems(obj, prefix)
    if found:
        raise ValueError("invalid configuration: " + "; ".join(found))
