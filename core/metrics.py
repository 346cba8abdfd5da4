"""Metrics endpoint of a component, registered for Prometheus file discovery.

Each process serves its metrics on 127.0.0.1 (a free port unless configured)
and writes ``HOME/prometheus/targets/<component>-<pid>.json`` so the
Prometheus started by ``dynaweb infra up`` scrapes it without manual edits;
the file is removed when the process exits.  A process that cannot remove its
own (killed, crashed, ended by a signal it does not handle) leaves it behind:
``remove_targets`` removes the files of given pids (the supervisor, for a child
it saw exit) and ``remove_dead_targets`` those of this host's dead processes,
so Prometheus drops the targets at its next file refresh and nothing counts a
dead component.  ``scrape_targets`` reads the files back and scrapes every
registered endpoint of a run directly (``dynaweb up``'s progress line and the
sample-efficiency study's diagnostics work without Prometheus).
"""

from __future__ import annotations

import atexit
import json
import os
import socket
import time
import urllib.request
from pathlib import Path
from typing import Protocol

from prometheus_client import REGISTRY, CollectorRegistry, start_http_server

from core.config import Config


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class TreeMemory:
    """``dynaweb_process_tree_resident_bytes``: the resident set of this process and all its
    descendants (``core.proctree``: a collector's Playwright driver and Chromium included), read
    at most every ``every_s`` (a walk of ``/proc``), beside prometheus_client's own
    ``process_resident_memory_bytes`` of the process alone.  Registered once per process by its
    metrics endpoint: every long-lived component reports it."""

    def __init__(self, every_s: float = 10.0):
        self.every_s = every_s
        self._at, self._value = 0.0, 0.0

    def collect(self):
        from prometheus_client.core import GaugeMetricFamily

        from core.proctree import tree_rss

        now = time.monotonic()
        if not self._at or now - self._at >= self.every_s:
            self._at, self._value = now, float(tree_rss(os.getpid()))
        yield GaugeMetricFamily(
            "dynaweb_process_tree_resident_bytes",
            "Resident bytes of this process and all its descendants (a collector's browser "
            "included).",
            value=self._value,
        )


_TREE_MEMORY: dict[int, TreeMemory] = {}  # registry id -> its collector (one per registry)


def register_tree_memory(registry: CollectorRegistry = REGISTRY) -> None:
    if id(registry) not in _TREE_MEMORY:
        _TREE_MEMORY[id(registry)] = TreeMemory()
        registry.register(_TREE_MEMORY[id(registry)])


class MetricsEndpoint:
    def __init__(
        self,
        cfg: Config,
        component: str,
        component_id: str,
        registry: CollectorRegistry = REGISTRY,
        labels: dict[str, str] | None = None,
    ):
        self.cfg = cfg
        self.component = component
        self.component_id = component_id
        self.labels = dict(labels or {})  # more target labels (a trainer rank's ``rank``)
        host = cfg.stack.bind
        self.port = cfg.metrics_port or free_port(host)
        register_tree_memory(registry)
        self.server, self.thread = start_http_server(self.port, addr=host, registry=registry)
        self.url = f"http://{host}:{self.port}/metrics"
        self.target_file = (
            cfg.home_path / "prometheus" / "targets" / f"{component}-{os.getpid()}.json"
        )
        self._register(host)
        atexit.register(self.close)

    def _register(self, host: str) -> None:
        self.target_file.parent.mkdir(parents=True, exist_ok=True)
        if host in (
            "0.0.0.0",
            "::",
            "",
        ):  # bound to every interface (containers): advertise the host name
            host = socket.gethostname()
        body = [
            {
                "targets": [f"{host}:{self.port}"],
                "labels": {
                    **self.labels,
                    "component": self.component,
                    "component_id": self.component_id,
                    "run": self.cfg.run_id,
                    "pid": str(os.getpid()),
                    "registered_at": str(int(time.time())),
                },
            }
        ]
        tmp = self.target_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(body))
        tmp.replace(self.target_file)

    def close(self) -> None:
        Path(self.target_file).unlink(missing_ok=True)
        if self.server is not None:
            server, self.server = self.server, None
            server.shutdown()
            server.server_close()


class RunHome(Protocol):
    """What the scrape-target files of a run are found by: the run's id and the state directory
    its processes register under (a ``Config`` is one)."""

    run_id: str

    @property
    def home_path(self) -> Path: ...


def run_targets(run: RunHome) -> list[tuple[Path, dict]]:
    """(file, target entry) of every file-discovery target this run's processes registered."""
    tdir = run.home_path / "prometheus" / "targets"
    out = []
    for f in sorted(tdir.glob("*.json")) if tdir.exists() else []:
        try:
            entry = json.loads(f.read_text())[0]
        except (ValueError, IndexError, KeyError, OSError):
            continue
        if isinstance(entry, dict) and entry.get("labels", {}).get("run") == run.run_id:
            out.append((f, entry))
    return out


def remove_targets(run: RunHome, pids: list[int] | set[int]) -> list[Path]:
    """Remove the targets this run's processes ``pids`` registered (processes known to have
    exited); returns the files removed."""
    wanted = {str(p) for p in pids}
    gone = []
    for f, entry in run_targets(run):
        if entry["labels"].get("pid") in wanted:
            f.unlink(missing_ok=True)
            gone.append(f)
    return gone


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


def remove_dead_targets(run: RunHome) -> list[Path]:
    """Remove this run's targets left by processes of this host that no longer exist (a target
    advertised on loopback is this host's; others may be another machine's, so they stay)."""
    dead = set()
    for _f, entry in run_targets(run):
        host = str((entry.get("targets") or [""])[0]).rsplit(":", 1)[0]
        pid = entry["labels"].get("pid", "")
        if host in ("127.0.0.1", "localhost", "[::1]") and pid.isdigit():
            if not _pid_alive(int(pid)):
                dead.add(int(pid))
    return remove_targets(run, dead) if dead else []


def scrape_targets(run: RunHome) -> list[tuple[dict, str]]:
    """(labels, metrics text) of every registered component of this run."""
    out = []
    for _f, entry in run_targets(run):
        try:
            with urllib.request.urlopen(f"http://{entry['targets'][0]}/metrics", timeout=2) as r:
                out.append((entry["labels"], r.read().decode()))
        except OSError:
            continue
    return out
