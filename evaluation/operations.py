"""What the benches and the sample-efficiency study use of the operations layer, passed in.

Starting a broker or the embedded stack is operations (``infra.stack``), above this layer.  A
bench that measures against a broker of its own (``bench collect``, ``bench streams``) or the
study that runs the stack around its cells is therefore given the factory by the command that
runs it (``infra.commands``: ``infra.stack.PrivateBroker``, ``infra.stack.Stack``); these
protocols say what is used of them.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from core.config import Config


class PrivateBroker(Protocol):
    """A broker of the bench's own, with its files under the ``home`` it was made with."""

    proc: subprocess.Popen | None  # the broker process (excluded from the bench's memory figures)

    def start(self, timeout: float = 20.0) -> str:
        """Start it; returns its bootstrap address ``host:port`` once it accepts connections."""
        ...

    def stop(self) -> None: ...


class Stack(Protocol):
    """The embedded stack of a config (S3, broker, task server, Prometheus)."""

    started: list[str]  # the services ``up`` started (not those it found running)

    def up(self, only: list[str] | None = None) -> dict: ...

    def down(self, only: list[str] | None = None) -> list[str]: ...


BrokerFactory = Callable[[Path], PrivateBroker]  # home -> a broker, not started yet
StackFactory = Callable[[Config], Stack]
