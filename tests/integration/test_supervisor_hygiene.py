"""The real supervisor with real children that crash (tests/integration/crash_child.py): the
file-discovery target of each dead child disappears, the restart back-off doubles and starts over
after a healthy run, the live Prometheus of the stack then sees exactly the one live component
(``dynaweb status`` counts it once) and the status total covers the dead processes too, and
stopping leaves no target behind."""

from __future__ import annotations

import copy
import time
from pathlib import Path

import pytest

from core.config import Config
from core.metrics import run_targets
from core.prom import Prom
from core.supervise import Supervisor
from infra.status import gather
from tests.support import wait_for

ENTRY = ("-m", "tests.integration.crash_child")
BACKOFF, HEALTHY = 0.3, 8.0
# three quick crashes (the back-off doubles), one run longer than HEALTHY (it starts over), then
# a child that stays until it is stopped
LIFETIMES = f"0.2,0.2,0.2,{HEALTHY + 4},-1"


def _pids_with_targets(cfg: Config) -> set[str]:
    return {e["labels"].get("pid") for _f, e in run_targets(cfg)}


def test_supervisor_removes_dead_targets_and_resets_the_backoff(
    run_cfg: Config, tmp_path: Path
) -> None:
    cfg = copy.deepcopy(run_cfg)
    cfg.up.restart_backoff_s, cfg.up.restart_healthy_s = BACKOFF, HEALTHY
    sup = Supervisor(cfg, {"crashy": [str(tmp_path / "starts"), LIFETIMES]}, entry=ENTRY)
    c = sup.child("crashy")
    left_behind, pids = [], []
    deadline = time.time() + 180
    try:
        while len(c.exits) < 4 and time.time() < deadline:
            pid = c.proc.pid if c.proc else None
            exits = len(c.exits)
            sup.supervise()
            if c.proc and c.proc.pid not in pids:
                pids.append(c.proc.pid)
            if len(c.exits) > exits:  # ``pid`` just died: its target must be gone already
                left_behind += [p for p in _pids_with_targets(cfg) if p == str(pid)]
            time.sleep(0.05)
        assert c.exits == [3, 3, 3, 3], (c.exits, c.log.read_text()[-2000:])
        assert left_behind == []
        assert c.delays == pytest.approx([BACKOFF, 2 * BACKOFF, 4 * BACKOFF, BACKOFF])
        # the fifth child stays up: the only target of the run is its own
        wait_for(lambda: sup.supervise() or c.proc is not None, 30, "the fifth start")
        live = str(c.proc.pid)
        pids.append(c.proc.pid)
        wait_for(lambda: _pids_with_targets(cfg) == {live}, 60, "the live child's target alone")

        # Prometheus (file discovery) drops the dead targets: status counts one component, up
        prom = Prom(f"http://127.0.0.1:{cfg.stack.prometheus_port}")

        def one_live() -> bool:
            rs = prom.query(f'up{{job="dynaweb", run="{cfg.run_id}"}}')
            return [(r["metric"].get("pid"), r["value"][1]) for r in rs] == [(live, "1")]

        wait_for(one_live, 60, "Prometheus seeing the live child alone", every=0.5)
        s = gather(prom, cfg.run_id)
        assert s["components"] == {"crashy": {"up": 1, "not_answering": 0}}
        # each process counted 10 steps; the total keeps the dead ones Prometheus scraped (at
        # least the long-lived fourth), where a sum of the live series would say 10
        steps = s["dream"]["steps"]
        assert steps is not None and steps >= 20 and steps % 10 == 0, steps
    finally:
        sup.stop(timeout=5)
    # SIGTERM ends the child without its exit handlers: the supervisor removed its target
    assert _pids_with_targets(cfg) == set()
    assert len(set(pids)) == 5  # five processes, one after the other
