"""A single-rank trainer initialises torch.distributed without a network store: a real DeepSpeed
engine built in a fresh process (no launcher variables) listens on loopback only; and the
interface a multi-rank trainer binds is chosen explicitly."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from models.train.engine import bind_interface, loopback_interface
from tests.listening import beyond_loopback, listening_sockets

ENGINE = """
import json, os, sys, torch
from models.train.engine import make_engine
e = make_engine(torch.nn.Linear(2, 2), 1e-3)
loss = e(torch.ones(1, 2)).sum(); e.backward(loss); e.step()
print("ENGINE", json.dumps({"pid": os.getpid(), "initialised": torch.distributed.is_initialized(),
                  "world": torch.distributed.get_world_size(),
                  "env": {k: os.environ.get(k) for k in ("MASTER_PORT", "GLOO_SOCKET_IFNAME")}}),
      flush=True)
sys.stdin.read()  # stay up (sockets open) until the test closes stdin
"""


def test_single_rank_engine_listens_on_loopback_only() -> None:
    dist = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "GLOO_SOCKET_IFNAME")
    env = {k: v for k, v in os.environ.items() if k not in dist}
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join([root, env.get("PYTHONPATH", "")])
    p = subprocess.Popen(
        [sys.executable, "-c", ENGINE],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    try:
        line = ""
        while not line.startswith("ENGINE "):  # DeepSpeed also logs to stdout
            line = p.stdout.readline()
            assert line, f"the engine process ended with {p.wait()}"
        info = json.loads(line.removeprefix("ENGINE "))
        sockets = listening_sockets({info["pid"]})
    finally:
        p.stdin.close()
        p.wait(60)
    assert info["initialised"] and info["world"] == 1
    assert info["env"]["MASTER_PORT"] is None  # no rendezvous port was picked
    assert info["env"]["GLOO_SOCKET_IFNAME"] == loopback_interface()
    assert beyond_loopback(sockets) == [], sockets


def test_bind_interface_choice(monkeypatch) -> None:
    lo = loopback_interface()
    monkeypatch.delenv("GLOO_SOCKET_IFNAME", raising=False)
    monkeypatch.delenv("NCCL_SOCKET_IFNAME", raising=False)
    assert bind_interface("", 1, "") == lo  # one rank
    assert bind_interface("", 8, "127.0.0.1") == lo  # several ranks, one host
    assert bind_interface("", 8, "localhost") == lo
    assert bind_interface("eth1", 1, "") == "eth1"  # named: always that one
    assert bind_interface("ib0", 16, "node1") == "ib0"
    with pytest.raises(ValueError, match="trainer.dist_interface"):
        bind_interface("", 16, "node1")  # several hosts, nothing named: no guess
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "eth0")
    assert bind_interface("", 16, "node1") is None  # the environment names it


def test_loopback_interface_holds_127_0_0_1() -> None:
    name = loopback_interface()
    psutil = pytest.importorskip("psutil")
    addrs = psutil.net_if_addrs().get(name, [])
    assert any(a.address == "127.0.0.1" for a in addrs), (name, addrs)
