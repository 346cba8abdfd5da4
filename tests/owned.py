"""Which processes a test run started, found by a tag in their environment, and stopping only those.

``.ci/run`` exports ``DYNAWEB_CI_TAG`` (unique per run) before the tests; every process the tests
start inherits it (the stack's services, ``up``'s supervisor and components, their children,
whatever session or process group they put themselves in, since every launcher passes
``os.environ`` on).  After the tests, ``python -m tests.owned`` stops by pid the processes that
still carry this run's tag and names the processes matching ``--pattern`` (the services' names)
that it left alone, because this run did not start them: another engineer's tests, a study's
broker.  Judging by name alone once stopped a broker that a separate study had started after CI
began.

Exit status 1 when it had to stop anything (nothing the tests start may outlive them), else 0.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import time
from pathlib import Path

TAG = "DYNAWEB_CI_TAG"


def environ(pid: int, proc: Path = Path("/proc")) -> dict[str, str]:
    """The environment ``pid`` started with ({} when it is gone or not readable)."""
    try:
        raw = (proc / str(pid) / "environ").read_bytes()
    except OSError:
        return {}
    out = {}
    for item in raw.split(b"\0"):
        k, sep, v = item.partition(b"=")
        if sep:
            out[k.decode(errors="replace")] = v.decode(errors="replace")
    return out


def cmdline(pid: int, proc: Path = Path("/proc")) -> str:
    try:
        return (proc / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        return ""


def pids(proc: Path = Path("/proc")) -> list[int]:
    return sorted(int(d.name) for d in proc.iterdir() if d.name.isdigit())


def owned(tag: str, proc: Path = Path("/proc"), exclude: set[int] | None = None) -> list[int]:
    """Processes whose environment carries ``DYNAWEB_CI_TAG=tag`` (this process and its
    ancestors excluded: the shell that runs CI carries the tag too)."""
    skip = set(exclude or ()) | ancestors(os.getpid(), proc)
    return [p for p in pids(proc) if p not in skip and environ(p, proc).get(TAG) == tag]


def ancestors(pid: int, proc: Path = Path("/proc")) -> set[int]:
    out = {pid}
    while pid > 1:
        try:
            stat = (proc / str(pid) / "stat").read_text()
        except OSError:
            break
        pid = int(stat[stat.rindex(")") + 2 :].split()[1])
        out.add(pid)
    return out


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is gone for our purpose
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat[stat.rindex(")") + 2] != "Z"
    except OSError:
        return False


def stop(targets: list[int], grace_s: float = 10.0) -> list[int]:
    """SIGTERM each pid, SIGKILL what still lives after ``grace_s``; the pids that were alive."""
    alive = []
    for p in targets:
        try:
            os.kill(p, signal.SIGTERM)
            alive.append(p)
        except ProcessLookupError:
            continue
    deadline = time.time() + grace_s
    while time.time() < deadline and any(_alive(p) for p in alive):
        time.sleep(0.1)
    for p in alive:
        if _alive(p):
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
    return alive


def left_alone(pattern: str, mine: set[int], proc: Path = Path("/proc")) -> list[tuple[int, str]]:
    """(pid, command line) of the processes matching ``pattern`` that are not in ``mine``."""
    rx = re.compile(pattern)
    skip = mine | ancestors(os.getpid(), proc)
    out = []
    for p in pids(proc):
        if p in skip:
            continue
        cmd = cmdline(p, proc)
        if cmd and rx.search(cmd):
            out.append((p, cmd))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tag", default=os.environ.get(TAG, ""), help=f"default: ${TAG}")
    ap.add_argument("--pattern", default="", help="regex of service command lines to report")
    ap.add_argument("--grace", type=float, default=10.0)
    a = ap.parse_args(argv)
    if not a.tag:
        ap.error(f"no tag: pass --tag or set {TAG}")
    mine = owned(a.tag)
    described = {p: cmdline(p) for p in mine}
    stopped = stop(mine, a.grace)
    for p in stopped:
        print(f"stopped pid {p} (started by this test run, still running): {described[p][:160]}")
    others = left_alone(a.pattern, set(mine), Path("/proc")) if a.pattern else []
    for p, cmd in others:
        print(f"left alone pid {p} (not started by this test run): {cmd[:160]}")
    print(
        f"processes: {len(stopped)} of this run stopped, {len(others)} matching services of "
        "others left alone"
    )
    return 1 if stopped else 0


if __name__ == "__main__":
    raise SystemExit(main())
