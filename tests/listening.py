"""Which addresses processes listen on: psutil when it is installed, else ``/proc`` (the sockets
of ``/proc/net/{tcp,tcp6,udp,udp6}`` matched by inode to the ``socket:[inode]`` links in
``/proc/<pid>/fd``).  A listening socket is a TCP socket in LISTEN or a bound UDP socket with no
peer.  Used by the loopback-only checks (``tests/e2e/test_up.py``)."""

from __future__ import annotations

import ipaddress
import os
import socket
from pathlib import Path
from typing import NamedTuple

from infra import soak


class Listening(NamedTuple):
    pid: int
    proto: str  # tcp or udp
    ip: str
    port: int


def is_loopback(ip: str) -> bool:
    """127.0.0.0/8, ::1 and IPv4-mapped loopback (``::ffff:127.0.0.1``); ``0.0.0.0`` and ``::``
    (every interface) are not."""
    addr = ipaddress.ip_address(ip.split("%", 1)[0])
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    return addr.is_loopback


def beyond_loopback(sockets: list[Listening]) -> list[Listening]:
    return [s for s in sockets if not is_loopback(s.ip)]


# --- /proc -------------------------------------------------------------------------------------


def _proc_ip(hex_ip: str) -> str:
    """An address of /proc/net/*: 32-bit words in host (little-endian) order."""
    raw = bytes.fromhex(hex_ip)
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    return str(ipaddress.ip_address(words))


def parse_proc_net(text: str, proto: str) -> dict[int, tuple[str, int]]:
    """inode -> (ip, port) of the listening sockets in a /proc/net/{tcp,tcp6,udp,udp6} table."""
    out = {}
    for line in text.splitlines()[1:]:
        f = line.split()
        if len(f) < 10:
            continue
        (lip, lport), rport, state = f[1].split(":"), f[2].split(":")[1], f[3]
        listening = state == "0A" if proto == "tcp" else int(rport, 16) == 0
        if listening and int(f[9]):
            out[int(f[9])] = (_proc_ip(lip), int(lport, 16))
    return out


def _proc_listening(pids: set[int], proc: Path = Path("/proc")) -> list[Listening]:
    out = []
    for pid in sorted(pids):
        tables: dict[int, tuple[str, str, int]] = {}
        for name in ("tcp", "tcp6", "udp", "udp6"):
            try:
                text = (proc / str(pid) / "net" / name).read_text()
            except OSError:
                continue
            proto = name.rstrip("6")
            for inode, (ip, port) in parse_proc_net(text, proto).items():
                tables[inode] = (proto, ip, port)
        try:
            fds = list((proc / str(pid) / "fd").iterdir())
        except OSError:  # gone, or not ours
            continue
        for fd in fds:
            try:
                link = os.readlink(fd)
            except OSError:
                continue
            if link.startswith("socket:[") and int(link[8:-1]) in tables:
                out.append(Listening(pid, *tables[int(link[8:-1])]))
    return out


def _proc_children(pid: int, proc: Path = Path("/proc")) -> set[int]:
    """Every descendant of ``pid`` (``infra.soak.process_tree``; its own stat need not be readable)."""
    return set(soak.process_tree(pid, proc)) - {pid}


# --- the interface -----------------------------------------------------------------------------


def process_tree(pid: int) -> set[int]:
    """``pid`` and every process under it."""
    try:
        import psutil
    except ImportError:
        return {pid} | _proc_children(pid)
    try:
        return {pid} | {c.pid for c in psutil.Process(pid).children(recursive=True)}
    except psutil.NoSuchProcess:
        return set()


def listening_sockets(pids: set[int], use_psutil: bool | None = None) -> list[Listening]:
    """The listening sockets of ``pids`` (processes that are gone are skipped)."""
    try:
        import psutil
    except ImportError:
        psutil = None
    if psutil is None or use_psutil is False:
        return _proc_listening(set(pids))
    out = []
    for pid in sorted(pids):
        try:
            conns = psutil.Process(pid).net_connections(kind="inet")
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        for c in conns:
            tcp = c.type == socket.SOCK_STREAM
            if c.laddr and (c.status == psutil.CONN_LISTEN if tcp else not c.raddr):
                out.append(Listening(pid, "tcp" if tcp else "udp", c.laddr.ip, c.laddr.port))
    return out
