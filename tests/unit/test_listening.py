"""The socket-listing helper of the loopback-only checks: real sockets of real processes, read
through psutil and through /proc (the fallback), and the /proc table format itself."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from tests.listening import (
    Listening,
    beyond_loopback,
    is_loopback,
    listening_sockets,
    parse_proc_net,
    process_tree,
)

HAVE_PSUTIL = True
try:
    import psutil  # noqa: F401
except ImportError:
    HAVE_PSUTIL = False

MODES = [False] + ([True] if HAVE_PSUTIL else [])


def test_is_loopback() -> None:
    for ip in ("127.0.0.1", "127.3.4.5", "::1", "::ffff:127.0.0.1"):
        assert is_loopback(ip), ip
    for ip in ("0.0.0.0", "::", "10.1.2.3", "192.168.0.7", "::ffff:10.0.0.1", "fe80::1%eth0"):
        assert not is_loopback(ip), ip


def test_parse_proc_net_tables() -> None:
    tcp = (
        "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
        "   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 111 1\n"
        "   1: 00000000:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 222 1\n"
        "   2: 0100007F:A000 0100007F:1F90 01 00000000:00000000 00:00000000 00000000  1000        0 333 1\n"
    )
    assert parse_proc_net(tcp, "tcp") == {111: ("127.0.0.1", 8080), 222: ("0.0.0.0", 22)}
    tcp6 = (
        "  sl  local_address                         remote_address                        st\n"
        "   0: 00000000000000000000000001000000:0050 00000000000000000000000000000000:0000 0A "
        "00000000:00000000 00:00000000 00000000 0 0 444 1\n"
        "   1: 00000000000000000000000000000000:01BB 00000000000000000000000000000000:0000 0A "
        "00000000:00000000 00:00000000 00000000 0 0 555 1\n"
    )
    assert parse_proc_net(tcp6, "tcp") == {444: ("::1", 80), 555: ("::", 443)}
    udp = (
        "  sl  local_address rem_address   st\n"
        "   0: 00000000:14E9 00000000:0000 07 00000000:00000000 00:00000000 00000000 0 0 666 2\n"
        "   1: 0100007F:A001 0100007F:0035 01 00000000:00000000 00:00000000 00000000 0 0 777 2\n"
    )
    assert parse_proc_net(udp, "udp") == {
        666: ("0.0.0.0", 5353)
    }  # the connected one is no listener


LISTENER = """
import socket, sys, time
socks = []
for host in sys.argv[1:]:
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((host, 0)); s.listen(); socks.append(s)
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind(("127.0.0.1", 0)); socks.append(u)
print(" ".join(str(s.getsockname()[1]) for s in socks), flush=True)
time.sleep(60)
"""


@pytest.fixture
def listeners():
    """A parent (python) with a child that listens on loopback and on every interface (TCP) and
    on loopback (UDP); yields (parent pid, child pid, [ports])."""
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, sys; p = subprocess.Popen([sys.executable, '-c', sys.argv[1], "
            "'127.0.0.1', '0.0.0.0']); p.wait()",
            LISTENER,
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        ports = [int(p) for p in parent.stdout.readline().split()]
        deadline = time.time() + 10
        tree = process_tree(parent.pid)
        while len(tree) < 2 and time.time() < deadline:
            time.sleep(0.05)
            tree = process_tree(parent.pid)
        (child,) = tree - {parent.pid}
        yield parent.pid, child, ports
    finally:
        for pid in process_tree(parent.pid) - {parent.pid}:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        parent.kill()
        parent.wait()


@pytest.mark.parametrize("use_psutil", MODES)
def test_listening_sockets_of_a_process_tree(listeners, use_psutil: bool) -> None:
    parent, child, (lo_port, any_port, udp_port) = listeners
    tree = process_tree(parent)
    assert tree == {parent, child}
    found = set(listening_sockets(tree, use_psutil=use_psutil))
    assert Listening(child, "tcp", "127.0.0.1", lo_port) in found
    assert Listening(child, "tcp", "0.0.0.0", any_port) in found
    assert Listening(child, "udp", "127.0.0.1", udp_port) in found
    assert not [s for s in found if s.pid == parent]  # the parent listens on nothing
    assert beyond_loopback(sorted(found)) == [Listening(child, "tcp", "0.0.0.0", any_port)]


@pytest.mark.parametrize("use_psutil", MODES)
def test_connected_sockets_are_not_listeners(use_psutil: bool) -> None:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    cli = socket.create_connection(srv.getsockname())
    conn, _ = srv.accept()
    try:
        found = listening_sockets({os.getpid()}, use_psutil=use_psutil)
        mine = [s for s in found if s.port in (srv.getsockname()[1], cli.getsockname()[1])]
        assert mine == [Listening(os.getpid(), "tcp", "127.0.0.1", srv.getsockname()[1])]
    finally:
        for s in (conn, cli, srv):
            s.close()


def test_gone_processes_are_skipped() -> None:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    assert listening_sockets({p.pid}) == []
    assert listening_sockets({p.pid}, use_psutil=False) == []
