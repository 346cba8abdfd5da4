"""A component that crashes on schedule, for the supervisor tests (run by the real ``Supervisor``
with ``entry=("-m", "tests.integration.crash_child")``): ``STATE LIFETIMES``.

Each start counts itself in the file STATE, registers its metrics endpoint (a file-discovery
target, as every component does), adds 10 to ``dynaweb_dream_steps_total`` and lives for the
next of the comma-separated LIFETIMES (seconds; the last one repeats; negative: until signalled),
then exits with code 3 without running its exit handlers, as a crash does: its target file stays
behind unless the supervisor removes it.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from prometheus_client import Counter

from core.config import load_config
from core.metrics import MetricsEndpoint


def main(state: str, lifetimes: str) -> None:
    cfg = load_config()
    f = Path(state)
    n = int(f.read_text()) if f.exists() else 0
    f.write_text(str(n + 1))
    MetricsEndpoint(cfg, "crashy", f"crashy-{cfg.run_id}")
    Counter("dynaweb_dream_steps_total", "Test steps.", ["run"]).labels(cfg.run_id).inc(10)
    spans = [float(x) for x in lifetimes.split(",")]
    life = spans[min(n, len(spans) - 1)]
    print(f"start {n + 1}: living {life} s", flush=True)
    if life < 0:
        while True:
            time.sleep(3600)
    time.sleep(life)
    os._exit(3)


if __name__ == "__main__":
    main(*sys.argv[1:3])
