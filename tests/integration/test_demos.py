"""Demonstrations through the real broker: ``dynaweb demos import`` then
``dynaweb demos export`` gives the same file back; an invalid file publishes
nothing and names its bad lines."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

from core.config import Config
from streams.records import Transition
from tests.support import env_for

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def _episode(run: str, ep: str, n: int, t0: float) -> list[dict]:
    out = []
    for i in range(n):
        o = {
            "instruction": f'Enter "bob" ({ep})',
            "url": "/miniwob/enter-text.html",
            "tree": f'[1] textbox\n[2] button "Submit" s{i}',
            "focused": None,
            "last_action_error": "",
            "next_id": 3,
            "element_ids": [1, 2],
        }
        no = dict(o, tree=o["tree"] + "+")
        t = Transition(
            run_id=run,
            episode_id=ep,
            step=i,
            task="miniwob/enter-text",
            seed=i + 7,
            source="expert",
            policy_version=0,
            world_model_version=0,
            obs=o,
            action='type(1, "bob")' if i == 0 else "click(2)",
            next_obs=no,
            reward=1.0 if i == n - 1 else 0.0,
            done=i == n - 1,
            created_at=t0 + i * 0.01,
            producer_id="human:test",
            info={"note": "ünïcode ✓"},
        )
        out.append(asdict(t))
    return out


def _cli(cfg: Config, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "infra.cli", *args],
        cwd=ROOT,
        env=env_for(cfg),
        capture_output=True,
        text=True,
        timeout=180,
    )


def _write(path: Path, rows: list) -> None:
    path.write_text(
        "".join(
            (r if isinstance(r, str) else json.dumps(r, ensure_ascii=False)) + "\n" for r in rows
        ),
        encoding="utf-8",
    )


def test_import_export_round_trip_and_invalid_file(run_cfg: Config, tmp_path: Path) -> None:
    run = run_cfg.run_id
    x = (
        _episode(run, "ep-a", 3, 1000.0)
        + _episode(run, "ep-b", 1, 1001.0)
        + _episode(run, "ep-c", 5, 1002.0)
    )

    bad = tmp_path / "bad.jsonl"
    _write(bad, [x[0], "{oops", dict(x[1], source="dream"), *x[2:4]])
    r = _cli(run_cfg, "demos", "import", str(bad))
    assert r.returncode == 2, r.stdout + r.stderr
    assert (
        f"{bad}:2:" in r.stderr and f"{bad}:3:" in r.stderr and "nothing was published" in r.stderr
    )

    src = tmp_path / "demos.jsonl"
    _write(src, x)
    r = _cli(run_cfg, "demos", "import", str(src), "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    res = json.loads(r.stdout.strip().splitlines()[-1])
    assert res["published"] == len(x) and res["episodes"] == 3 and res["invalid"] == 0

    out = tmp_path / "out.jsonl"
    r = _cli(run_cfg, "demos", "export", str(out), "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    got = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert got == x  # nothing from the invalid file, nothing lost, same order
    assert json.loads(r.stdout.strip().splitlines()[-1])["duplicates"] == 0

    # importing the same file again: the export still has each transition once (duplicates counted)
    assert _cli(run_cfg, "demos", "import", str(src)).returncode == 0
    r = _cli(run_cfg, "demos", "export", str(out), "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    assert [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()] == x
    assert json.loads(r.stdout.strip().splitlines()[-1])["duplicates"] == len(x)
