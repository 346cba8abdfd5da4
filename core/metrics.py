"""Metrics endpoint of a component, registered for Prometheus file discovery.

Each process serves its metrics on 127.0.0.1 (a free port unless configured)
and writes ``HOME/prometheus/targets/<component>-<pid>.json`` so the
Prometheus started by ``dynaweb infra up`` scrapes it without manual edits;
the file is removed when the process exits.  ``scrape_targets`` reads those
files back and scrapes every registered endpoint of a run directly (``dynaweb
up``'s progress line and the sample-efficiency study's diagnostics work without
Prometheus).
"""

from __future__ import annotations

import atexit
import json
import os
import socket
import time
import urllib.request
from pathlib import Path

from prometheus_client import REGISTRY, CollectorRegistry, start_http_server

from core.config import Config


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class MetricsEndpoint:
    def __init__(
        self, cfg: Config, component: str, component_id: str, registry: CollectorRegistry = REGISTRY
    ):
        self.cfg = cfg
        self.component = component
        self.component_id = component_id
        host = cfg.stack.bind
        self.port = cfg.metrics_port or free_port(host)
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


def scrape_targets(cfg: Config) -> list[tuple[dict, str]]:
    """(labels, metrics text) of every registered component of this run."""
    out = []
    tdir = cfg.home_path / "prometheus" / "targets"
    for f in sorted(tdir.glob("*.json")) if tdir.exists() else []:
        try:
            entry = json.loads(f.read_text())[0]
        except (ValueError, IndexError, OSError):
            continue
        if entry["labels"].get("run") != cfg.run_id:
            continue
        try:
            with urllib.request.urlopen(f"http://{entry['targets'][0]}/metrics", timeout=2) as r:
                out.append((entry["labels"], r.read().decode()))
        except OSError:
            continue
    return out
