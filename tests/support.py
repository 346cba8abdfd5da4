"""Helpers shared by the integration and end-to-end tests (real services only)."""

from __future__ import annotations

import copy
import os
import uuid
from collections.abc import Callable

from core.config.runtime import Config, load_config
from core.net import free_port_block
from core.waiting import wait_until


def stack_config(home: str) -> Config:
    s3, broker, prom, task = free_port_block(4)
    aux = free_port_block(5)[0]
    return load_config(
        env={},
        overrides={
            "home": home,
            "run_id": "tests",
            "stack.s3_port": s3,
            "s3.endpoint": f"127.0.0.1:{s3}",
            "stack.broker_port": broker,
            "kafka.bootstrap": f"127.0.0.1:{broker}",
            "stack.prometheus_port": prom,
            "stack.taskserver_port": task,
            "stack.s3_aux_port_base": aux,
            "stack.scrape_interval_s": 1.0,
        },
    )


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
    env.update(
        {
            "DYNAWEB_HOME": cfg.home,
            "DYNAWEB_RUN_ID": cfg.run_id,
            "DYNAWEB_KAFKA__BOOTSTRAP": cfg.kafka.bootstrap,
            "DYNAWEB_S3__ENDPOINT": cfg.s3.endpoint,
            "DYNAWEB_STACK__S3_PORT": str(cfg.stack.s3_port),
            "DYNAWEB_STACK__BROKER_PORT": str(cfg.stack.broker_port),
            "DYNAWEB_STACK__PROMETHEUS_PORT": str(cfg.stack.prometheus_port),
            "DYNAWEB_STACK__TASKSERVER_PORT": str(cfg.stack.taskserver_port),
            "DYNAWEB_STACK__S3_AUX_PORT_BASE": str(cfg.stack.s3_aux_port_base),
            "DYNAWEB_STACK__SCRAPE_INTERVAL_S": str(cfg.stack.scrape_interval_s),
            "PYTHONUNBUFFERED": "1",
        }
    )
    env.update(extra)
    return env


def wait_for(cond: Callable[[], object], timeout: float, what: str, every: float = 0.1) -> object:
    """``core.waiting.wait_until`` for tests: a time-out is a test failure."""
    return wait_until(cond, timeout, what, every=every, error=AssertionError)
