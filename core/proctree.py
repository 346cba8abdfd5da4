"""A process and all its descendants, read from ``/proc``: their resident memory and CPU time.

A collector's Playwright driver and Chromium start process groups of their own, so the tree is
followed by parent pid, not by group.  Used by the soak (``infra.soak``) and by every
component's metrics endpoint (``core.metrics``: ``dynaweb_process_tree_resident_bytes``)."""

from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path

PAGE = os.sysconf("SC_PAGE_SIZE")


TICK = os.sysconf("SC_CLK_TCK")


def process_tree(pid: int, proc: Path = Path("/proc")) -> dict[int, list[str]]:
    """pid -> ``stat`` fields (after ``pid (comm) ``) of ``pid`` and all its descendants (a
    collector's Playwright driver and Chromium start their own process groups, so the tree is
    followed, not the group)."""
    stats: dict[int, list[str]] = {}
    children: dict[int, list[int]] = defaultdict(list)
    for d in proc.iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) ": state ppid ...
        stats[int(d.name)] = fields
        children[int(fields[1])].append(int(d.name))
    out: dict[int, list[str]] = {}
    seen, todo = set(), [pid]
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        if p in stats:
            out[p] = stats[p]
        todo.extend(children.get(p, ()))
    return out


def tree_rss(pid: int, proc: Path = Path("/proc")) -> int:
    """Resident bytes of process ``pid`` and all its descendants."""
    return sum(int(f[21]) * PAGE for f in process_tree(pid, proc).values())


def tree_cpu_s(pid: int, proc: Path = Path("/proc")) -> float:
    """CPU seconds (user + system, with reaped children's) of ``pid`` and all its descendants."""
    return sum(sum(int(x) for x in f[11:15]) for f in process_tree(pid, proc).values()) / TICK


__all__ = ["PAGE", "TICK", "process_tree", "tree_cpu_s", "tree_rss"]
