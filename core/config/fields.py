"""The one way a config field is declared: a default and a help string (``dynaweb config
--describe`` prints them), and the check of ``Literal`` choices when a value is set."""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import field
from typing import Any, Literal


def _f(default: Any, help: str, **kw: Any) -> Any:
    if isinstance(default, list | dict):
        return field(default_factory=lambda d=default: type(d)(d), metadata={"help": help}, **kw)
    return field(default=default, metadata={"help": help}, **kw)


def choices(cls: type, name: str) -> tuple | None:
    """The allowed values of field ``name`` of dataclass ``cls`` when it is a ``Literal``, else
    None."""
    hint = typing.get_type_hints(cls).get(name)
    return typing.get_args(hint) if typing.get_origin(hint) is Literal else None


def check_choice(obj: Any, name: str, value: Any, path: str) -> None:
    """ValueError naming the allowed values when ``value`` is not one of a ``Literal`` field's."""
    allowed = choices(type(obj), name) if dataclasses.is_dataclass(obj) else None
    if allowed is not None and value not in allowed:
        raise ValueError(f"{path} = {value!r} is not one of {', '.join(map(repr, allowed))}")
