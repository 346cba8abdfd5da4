"""Demonstration file validation (no broker)."""

from __future__ import annotations

import json
from dataclasses import asdict

import pytest

from collectors import demos
from core.config import Config
from streams.records import Transition


def tr(ep: str, step: int, done: bool = False, **kw) -> dict:
    t = Transition(
        run_id="r1",
        episode_id=ep,
        step=step,
        task="miniwob/enter-text",
        seed=3,
        source="expert",
        policy_version=0,
        world_model_version=0,
        obs={"instruction": "type bob", "tree": f"[1] s{step}"},
        action="click(1)",
        next_obs={"instruction": "type bob", "tree": f"[1] s{step + 1}"},
        reward=1.0 if done else 0.0,
        done=done,
        created_at=100.0 + step,
        producer_id="human:a",
    )
    d = asdict(t)
    d.update(kw)
    return d


def lines(*ds: dict | str) -> list[str]:
    return [d if isinstance(d, str) else json.dumps(d) for d in ds]


def test_valid_file_parses_and_round_trips_to_lines() -> None:
    src = lines(tr("e1", 0), tr("e1", 1, done=True), "", tr("e2", 0, done=True))
    p = demos.parse_lines(src, "r1")
    assert not p.errors and p.blank == 1 and len(p.transitions) == 3 and p.lines == [1, 2, 4]
    out = [demos.to_line(t) for t in demos.export_order(p.transitions)]
    assert [json.loads(x) for x in out] == [json.loads(x) for x in src if x]


def test_each_invalid_line_is_reported_with_its_number() -> None:
    bad = tr("e3", 0, done=True)
    del bad["obs"]
    src = lines(
        tr("e1", 0, done=True),
        "{not json",
        tr("e2", 0, done=True, source="real"),
        bad,
        tr("e4", 0, done=True, colour="red"),
        "[1, 2]",
        {**tr("e5", 0, done=True), "step": -1},
        tr("e6", 0, done=True, reward="high"),
    )
    p = demos.parse_lines(src, "r1")
    got = {n: m for n, m in p.errors}
    assert sorted(got) == [2, 3, 4, 5, 6, 7, 8], p.errors
    assert "not_json" in got[2] and "source must be 'expert'" in got[3] and "'obs'" in got[4]
    assert (
        "colour" in got[5] and "JSON object" in got[6] and "step" in got[7] and "reward" in got[8]
    )
    assert len(p.transitions) == 1


def test_episode_structure_is_checked() -> None:
    src = lines(
        tr("a", 0),
        tr("a", 0),
        tr("a", 1, done=True),  # duplicate step
        tr("b", 0),
        tr("b", 2, done=True),  # gap
        tr("c", 0, done=True),
        tr("c", 1, done=True),  # final before the end
        tr("d", 0),
        tr("d", 1),
    )  # never ends
    p = demos.parse_lines(src, "r1")
    msgs = dict(p.errors)
    assert "again (first on line 1)" in msgs[2]
    assert "[1] missing" in msgs[5]
    assert "step 0 is done/truncated" in msgs[6]
    assert "neither done nor truncated" in msgs[9]


def test_run_id_missing_or_foreign_becomes_the_target_run() -> None:
    a = tr("e1", 0, done=True)
    del a["run_id"]
    b = tr("e2", 0, done=True, run_id="other")
    p = demos.parse_lines(lines(a, b), "target")
    assert (
        not p.errors and {t.run_id for t in p.transitions} == {"target"} and p.run_id_rewritten == 1
    )


def test_import_with_errors_publishes_nothing(tmp_path) -> None:
    f = tmp_path / "d.jsonl"
    f.write_text("\n".join(lines(tr("e1", 0, done=True), "nope")) + "\n")

    with pytest.raises(demos.DemoFileError) as ei:
        demos.import_file(Config(run_id="r1"), f)
    assert ei.value.errors[0][0] == 2 and f"{f}:2:" in str(ei.value)
