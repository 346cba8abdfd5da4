"""Child processes of a run, supervised: started, restarted with back-off, stopped cleanly.

Every child is one command of the ``dynaweb`` command line (``python -m infra.cli <argv>``, run
by name in a new process group), with the run's resolved config in
``HOME/runs/<run>/config.json`` (secrets stay in the environment / credentials file) and its
output in ``HOME/logs/<run>/<name>.log``.  A child that exits is restarted after a back-off that
doubles up to 30 s, unless it is a job (``once``) that exited 0; a child that ran at least
``up.restart_healthy_s`` before it exited was healthy, and its back-off starts over at
``up.restart_backoff_s``.  The Prometheus file-discovery targets of a child that exited (or was
stopped) are removed by pid (``core.metrics.remove_targets``): a crashed or killed process cannot
remove its own, and a dead target would be counted as a component that is down.  Used by
``dynaweb up`` (one of each component) and by the sample-efficiency study (the components of one
cell).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from core.config import Config
from core.metrics import remove_dead_targets, remove_targets

REPO = Path(__file__).resolve().parent.parent
ENTRY = ("-m", "infra.cli")  # the command line every child runs (a module started by name)


@dataclass
class Child:
    name: str
    argv: list[str]
    log: Path
    proc: subprocess.Popen | None = None
    restarts: int = 0
    next_start: float = 0.0
    backoff: float = 2.0
    exits: list = field(default_factory=list)
    once: bool = False  # a job (e.g. a bounded collector): exit 0 means done, not a crash
    done: bool = False
    started_at: float = 0.0  # when the running (or last) process started
    delays: list = field(default_factory=list)  # the restart delay chosen at each exit (s)


def write_config(cfg: Config, path: Path) -> Path:
    """``cfg``'s runtime part (no study section, no secrets), checked, as a child's config file."""
    runtime = cfg.runtime()
    runtime.validate()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(runtime.to_dict(drop_secrets=True), indent=1))
    return path


def child_env(cfg: Config, config_file: Path) -> dict:
    """The environment of a child ``dynaweb`` process whose whole config is ``config_file``."""
    from core.config import SECRETS

    # the config file is the child's whole config: inherited DYNAWEB_<SECTION>__<FIELD> variables
    # would override it (they are already resolved into it); only secrets travel by environment
    keep = {f"DYNAWEB_{sec.upper()}__{key.upper()}" for sec, key in SECRETS}
    env = {
        k: v
        for k, v in os.environ.items()
        if not (k.startswith("DYNAWEB_") and "__" in k) or k in keep
    }
    env.update(
        {
            "DYNAWEB_CONFIG": str(config_file),
            "DYNAWEB_HOME": str(cfg.home_path),
            "DYNAWEB_RUN_ID": cfg.run_id,
            "PYTHONUNBUFFERED": "1",
            "PYTHONPATH": os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]),
        }
    )
    return env


class Supervisor:
    """``components``: child name -> its command-line arguments; the names in ``once`` are jobs.
    ``entry``: what every child runs before its arguments (the ``dynaweb`` command line)."""

    def __init__(
        self,
        cfg: Config,
        components: dict[str, list[str]],
        once: tuple = (),
        entry: tuple = ENTRY,
    ):
        # the children's whole config: the runtime part (no study section), checked here so a
        # contradiction is said once, before anything starts, not by every child at its start
        runtime = cfg.runtime()
        runtime.validate()
        self.cfg = cfg
        self.entry = tuple(entry)
        self.first_backoff = cfg.up.restart_backoff_s
        self.healthy_s = cfg.up.restart_healthy_s
        remove_dead_targets(cfg)  # left by processes of an earlier start of this run
        self.run_dir = cfg.home_path / "runs" / cfg.run_id
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.config_file = self.run_dir / "config.json"
        self.config_file.write_text(json.dumps(runtime.to_dict(drop_secrets=True), indent=1))
        self.logs = cfg.home_path / "logs" / cfg.run_id
        self.logs.mkdir(parents=True, exist_ok=True)
        self.children = [
            Child(n, a, self.logs / f"{n}.log", backoff=cfg.up.restart_backoff_s, once=n in once)
            for n, a in components.items()
        ]

    def child(self, name: str) -> Child:
        return next(c for c in self.children if c.name == name)

    def _env(self) -> dict:
        return child_env(self.cfg, self.config_file)

    def start(self, c: Child) -> None:
        log = open(c.log, "ab")
        c.proc = subprocess.Popen(
            [sys.executable, *self.entry, *c.argv],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=self._env(),
            start_new_session=True,
        )
        c.started_at = time.time()
        log.close()

    def _ended(self, c: Child) -> None:
        """``c``'s process has exited: forget it and remove the targets it registered."""
        if c.proc is not None:
            remove_targets(self.cfg, [c.proc.pid])
        c.proc = None

    def restart_delay(self, c: Child, now: float) -> float:
        """The delay before ``c`` starts again after an exit at ``now`` (and the next one's)."""
        if now - c.started_at >= self.healthy_s:
            c.backoff = self.first_backoff  # it had been healthy: the back-off starts over
        delay = c.backoff
        c.backoff = min(30.0, c.backoff * 2)
        return delay

    def supervise(self) -> None:
        now = time.time()
        for c in self.children:
            if c.done:
                continue
            if c.proc is None:
                if now >= c.next_start:
                    self.start(c)
                continue
            rc = c.proc.poll()
            if rc is not None:
                c.exits.append(rc)
                self._ended(c)
                if c.once and rc == 0:
                    c.done = True
                    continue
                c.restarts += 1
                c.delays.append(self.restart_delay(c, now))
                c.next_start = now + c.delays[-1]
                print(
                    f"[up] {c.name} exited with {rc}; restarting in {c.next_start - now:.0f}s "
                    f"(log: {c.log})",
                    flush=True,
                )

    def stop_one(self, name: str, timeout: float = 25.0) -> None:
        """Stop one child for good (SIGTERM, then SIGKILL after ``timeout``)."""
        c = self.child(name)
        c.done = True
        if c.proc is None:
            return
        if c.proc.poll() is None:
            os.killpg(c.proc.pid, signal.SIGTERM)
            try:
                c.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(c.proc.pid, signal.SIGKILL)
                c.proc.wait()
        self._ended(c)

    def stop(self, timeout: float = 25.0) -> None:
        for c in self.children:
            if c.proc and c.proc.poll() is None:
                os.killpg(c.proc.pid, signal.SIGTERM)
        deadline = time.time() + timeout
        for c in self.children:
            if c.proc is None:
                continue
            try:
                c.proc.wait(max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                os.killpg(c.proc.pid, signal.SIGKILL)
                c.proc.wait()
            self._ended(c)
