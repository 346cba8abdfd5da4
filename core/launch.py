"""Several local ranks of one command, started and stopped as one group (``dynaweb train --ranks N``).

``LocalRanks`` starts N copies of a ``dynaweb`` command (``python -m infra.cli <argv>``) with the
environment the ``deepspeed`` launcher and ``torchrun`` give their ranks (RANK, LOCAL_RANK,
WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1, MASTER_PORT: a free port) and the resolved
config in ``HOME/runs/<run>/<name>.json`` (secrets stay in the environment, as for
``core.supervise``).  ``threads`` is the group's: each rank gets ``threads // N`` (at least 1).
Each rank's output lines reach this process's stdout prefixed with ``[rank R]``.

The ranks stay in this process's process group, so whoever stops the group's process group
(``core.supervise.Supervisor``: SIGTERM, then SIGKILL) stops them all; on Linux a rank also gets
SIGTERM when this process dies.  ``wait`` returns when every rank has exited: 0 if every one
exited 0.  The first rank to exit otherwise (an error, a signal) is named; the others get
``grace_s`` to stop by themselves (a trainer rank that loses a peer exits with an error naming it)
before SIGTERM, and ``grace_s`` more before SIGKILL; then the group's exit code is 1.  The
supervisor then restarts the whole group as one component.  The Prometheus targets of exited
ranks are removed (``core.metrics.remove_targets``).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import IO

from core.config import Config
from core.metrics import free_port, remove_targets
from core.supervise import ENTRY, child_env, write_config


def rank_env(rank: int, world: int, master_port: int) -> dict[str, str]:
    """What a launcher sets for rank ``rank`` of ``world`` ranks on this host."""
    return {
        "RANK": str(rank),
        "LOCAL_RANK": str(rank),
        "WORLD_SIZE": str(world),
        "LOCAL_WORLD_SIZE": str(world),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(master_port),
    }


def _libc() -> object | None:
    try:
        import ctypes

        return ctypes.CDLL("libc.so.6", use_errno=True)
    except (OSError, AttributeError):
        return None


def _in_child(libc: object | None) -> None:
    """In a rank before exec: SIGINT ignored (Ctrl-C reaches the launcher, which stops the ranks
    in order) and, on Linux, SIGTERM when the launcher dies (PR_SET_PDEATHSIG)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if libc is not None:
        libc.prctl(1, signal.SIGTERM)  # type: ignore[attr-defined]


def exit_text(rc: int) -> str:
    """``rc`` of a ``Popen`` in words (a negative one is the signal that ended it)."""
    if rc < 0:
        try:
            return f"was killed by {signal.Signals(-rc).name}"
        except ValueError:
            return f"was killed by signal {-rc}"
    return f"exited with {rc}"


@dataclass
class Rank:
    rank: int
    proc: subprocess.Popen
    rc: int | None = None
    ended_at: float = 0.0
    reader: threading.Thread | None = field(default=None, repr=False)


class LocalRanks:
    """N ranks of ``argv`` (the ``dynaweb`` command line after the program) on this host."""

    def __init__(
        self,
        cfg: Config,
        ranks: int,
        argv: list[str],
        name: str = "ranks",
        grace_s: float = 15.0,
        entry: tuple = ENTRY,
        out: IO[str] | None = None,
    ):
        if ranks < 2:
            raise ValueError(f"LocalRanks needs 2 ranks or more, got {ranks}")
        self.cfg, self.n, self.argv, self.grace_s = cfg, ranks, list(argv), grace_s
        self.entry = tuple(entry)
        self.out = out or sys.stdout
        self._lock = threading.Lock()
        per_rank = cfg.runtime()
        per_rank.threads = max(1, int(cfg.threads) // ranks)
        self.config_file = write_config(
            per_rank, cfg.home_path / "runs" / cfg.run_id / f"{name}.json"
        )
        self.port = free_port()
        self.ranks: list[Rank] = []
        self.failed: Rank | None = None  # the first rank that did not exit 0

    def start(self) -> LocalRanks:
        env = child_env(self.cfg, self.config_file)
        libc = _libc() if sys.platform.startswith("linux") else None
        for r in range(self.n):  # every fork before any relay thread runs
            proc = subprocess.Popen(
                [sys.executable, *self.entry, *self.argv],
                env={**env, **rank_env(r, self.n, self.port)},
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                bufsize=1,
                preexec_fn=lambda: _in_child(libc),
            )
            self.ranks.append(Rank(r, proc))
        for rk in self.ranks:
            self._say(f"rank {rk.rank} of {self.n} started (pid {rk.proc.pid})")
            rk.reader = threading.Thread(target=self._relay, args=(rk,), daemon=True)
            rk.reader.start()
        return self

    def _say(self, line: str) -> None:
        with self._lock:
            self.out.write(f"[ranks] {line}\n")
            self.out.flush()

    def _relay(self, rk: Rank) -> None:
        assert rk.proc.stdout is not None
        for line in rk.proc.stdout:
            with self._lock:
                self.out.write(f"[rank {rk.rank}] {line}")
                self.out.flush()

    def _reap(self) -> list[Rank]:
        """Ranks that exited since the last call (their rc and targets recorded)."""
        ended = []
        for rk in self.ranks:
            if rk.rc is None and rk.proc.poll() is not None:
                rk.rc, rk.ended_at = rk.proc.returncode, time.time()
                remove_targets(self.cfg, [rk.proc.pid])
                ended.append(rk)
        return ended

    def running(self) -> list[Rank]:
        return [rk for rk in self.ranks if rk.rc is None]

    def signal_all(self, sig: int) -> None:
        for rk in self.running():
            try:
                rk.proc.send_signal(sig)
            except ProcessLookupError:
                pass

    def wait(self, stop: threading.Event | None = None, poll_s: float = 0.1) -> int:
        """Until every rank has exited (see the module doc); ``stop`` set: SIGTERM to every rank,
        SIGKILL after ``grace_s``.  Returns 0 if every rank exited 0, else 1."""
        deadline_term = deadline_kill = None
        while self.running():
            for rk in self._reap():
                self._say(f"rank {rk.rank} (pid {rk.proc.pid}) {exit_text(rk.rc)}")
                if rk.rc != 0 and self.failed is None:
                    self.failed = rk
                    self._say(
                        f"trainer group lost rank {rk.rank} of {self.n}: stopping the other ranks"
                    )
                    deadline_term = time.time() + self.grace_s
            now = time.time()
            if stop is not None and stop.is_set() and deadline_kill is None:
                self.signal_all(signal.SIGTERM)  # the ranks stop together (rank 0 tells the others)
                deadline_term, deadline_kill = None, now + 2 * self.grace_s
            if deadline_term is not None and now >= deadline_term and self.running():
                self.signal_all(signal.SIGTERM)
                deadline_term, deadline_kill = None, now + self.grace_s
            if deadline_kill is not None and now >= deadline_kill and self.running():
                self.signal_all(signal.SIGKILL)
                deadline_kill = now + 3600
            time.sleep(poll_s)
        self._reap()
        for rk in self.ranks:
            if rk.reader is not None:
                rk.reader.join(timeout=2)
        if self.failed is None and all(rk.rc == 0 for rk in self.ranks):
            return 0
        bad = self.failed or next(rk for rk in self.ranks if rk.rc != 0)
        self._say(
            f"trainer group stopped: rank {bad.rank} of {self.n} (pid {bad.proc.pid}) "
            f"{exit_text(bad.rc if bad.rc is not None else 1)} first; "
            + ", ".join(f"rank {rk.rank} {exit_text(rk.rc)}" for rk in self.ranks if rk is not bad)
        )
        return 1


def run_local_ranks(cfg: Config, ranks: int, argv: list[str], name: str = "ranks") -> int:
    """Start ``ranks`` local ranks of ``argv`` and wait for them (SIGTERM / SIGINT to this
    process stop them all); the group's exit code."""
    stop = threading.Event()
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
    group = LocalRanks(cfg, ranks, argv, name=name).start()
    return group.wait(stop)
