"""Loopback networking helpers: is a port open or bindable, a block of free ports, an HTTP status.

Used by the embedded stack's health checks (``infra.stack``), by the benches that start a broker
of their own and by the tests' private stacks.
"""

from __future__ import annotations

import random
import socket
import urllib.error
import urllib.request


def port_open(host: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def port_bindable(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as s:
        try:
            s.bind((host, port))
            return True
        except OSError:
            return False


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """``n`` distinct ports the system hands out as free right now (bound together, then released)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind((host, 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def free_port_block(n: int, lo: int = 20000, hi: int = 29000) -> list[int]:
    """``n`` consecutive ports that nothing listens on and that can be bound, also at +10000 (where
    SeaweedFS puts its gRPC ports), for a private stack next to the default one."""
    for _ in range(200):
        base = random.randint(lo, hi)
        block = [base + i for i in range(n)]
        if all(
            not port_open("127.0.0.1", q, 0.2) and port_bindable(q)
            for p in block
            for q in (p, p + 10000)
        ):
            return block
    raise RuntimeError(f"no block of {n} free ports found in {lo}-{hi}")


def http_status(url: str, timeout: float = 1.0) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except (urllib.error.URLError, OSError):
        return None
