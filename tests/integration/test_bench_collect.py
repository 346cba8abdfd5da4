"""``dynaweb bench collect --seconds 3 --json`` runs end to end (private broker,
real Chromium) and prints one JSON object with the documented keys, for runs with
and without the settle wait.  The
throughput targets are not asserted here (a shared 2-core machine is noisy)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.conftest_collectors import require_chromium

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def test_bench_collect_prints_the_summary_json() -> None:
    require_chromium()
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "infra.cli",
            "bench",
            "collect",
            "--seconds",
            "3",
            "--json",
            "--tasks",
            "miniwob/enter-text,miniwob/login-user",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    s = json.loads(r.stdout.strip().splitlines()[-1])
    for k in ("steps_per_s_1", "steps_per_s_4", "episodes_per_s_4", "peak_rss_mb", "ratio_4_1"):
        assert isinstance(s[k], (int, float)) and s[k] > 0, (k, s)
    assert s["tasks"] == ["miniwob/enter-text", "miniwob/login-user"]
    assert s["published"] == s["acked"] > 0 and s["publish_errors"] == 0
    # with the settle wait (the environment's default), then the same without it
    assert [(run["contexts"], run["settle_ms"]) for run in s["runs"]] == [
        (1, 30.0),
        (4, 30.0),
        (1, 0.0),
        (4, 0.0),
    ]
    assert (
        s["settle_ms"] == 30.0
        and s["no_settle"]["steps_per_s_4"] > 0
        and s["no_settle"]["ratio_4_1"] > 0
    )
    assert all(run["success_rate"] == 1.0 for run in s["runs"])
    assert 0 < s["cores_busy_1"] <= s["cpus"]
