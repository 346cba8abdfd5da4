"""Helpers shared by the integration and end-to-end tests (real services only)."""

from __future__ import annotations

import copy
import os
import random
import socket
import time
import uuid
from collections.abc import Callable

from infra.config import Config, load_config


def port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def pick_ports(n: int, spread: int = 1) -> list[int]:
    """n free ports; with spread, a block of consecutive ports (also free at +10000 for gRPC)."""
    for _ in range(200):
        base = random.randint(20000, 29000)
        block = [base + i for i in range(n)]
        if all(port_free(p) and port_free(p + 10000) for p in block):
            return block
    raise RuntimeError("no free port block found")


def stack_config(home: str) -> Config:
    s3, broker, prom, task = pick_ports(4)
    aux = pick_ports(5)[0]
    return load_config(env={}, overrides={
        "home": home, "run_id": "tests",
        "stack.s3_port": s3, "s3.endpoint": f"127.0.0.1:{s3}", "stack.broker_port": broker,
        "kafka.bootstrap": f"127.0.0.1:{broker}", "stack.prometheus_port": prom,
        "stack.taskserver_port": task, "stack.s3_aux_port_base": aux, "stack.scrape_interval_s": 1.0,
    })  # fmt: skip


def fresh_run(cfg: Config, prefix: str = "t") -> Config:
    c = copy.deepcopy(cfg)
    c.run_id = f"{prefix}-{uuid.uuid4().hex[:8]}"
    return c


def env_for(cfg: Config, **extra: str) -> dict:
    """Environment that makes a child `dynaweb` process use this config."""
    # not this process's config, nor its torch.distributed rendezvous (an in-process trainer
    # test leaves MASTER_PORT bound; a child must pick its own)
    dist = {"MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK"}
    env = {k: v for k, v in os.environ.items() if not k.startswith("DYNAWEB_") and k not in dist}
    env.update({
        "DYNAWEB_HOME": cfg.home, "DYNAWEB_RUN_ID": cfg.run_id,
        "DYNAWEB_KAFKA__BOOTSTRAP": cfg.kafka.bootstrap, "DYNAWEB_S3__ENDPOINT": cfg.s3.endpoint,
        "DYNAWEB_STACK__S3_PORT": str(cfg.stack.s3_port), "DYNAWEB_STACK__BROKER_PORT": str(cfg.stack.broker_port),
        "DYNAWEB_STACK__PROMETHEUS_PORT": str(cfg.stack.prometheus_port),
        "DYNAWEB_STACK__TASKSERVER_PORT": str(cfg.stack.taskserver_port),
        "DYNAWEB_STACK__S3_AUX_PORT_BASE": str(cfg.stack.s3_aux_port_base),
        "DYNAWEB_STACK__SCRAPE_INTERVAL_S": str(cfg.stack.scrape_interval_s),
        "PYTHONUNBUFFERED": "1",
    })  # fmt: skip
    env.update(extra)
    return env


def wait_for(cond: Callable[[], object], timeout: float, what: str, interval: float = 0.2) -> object:
    deadline = time.time() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.time() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)
