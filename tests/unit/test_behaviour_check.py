"""``dynaweb check-behaviour``: a snapshot of the same pages compares identical, and a change in
what a reader returns is reported (exit 1).  The pages are built here; the command captures real
ones in Chromium (docs/architecture.md)."""

from __future__ import annotations

import json

from core.spaces import Observation
from evaluation.behaviour import compare, snapshot

PAGE = Observation(
    'Click on the "Yes" button.',
    "u",
    '[1] button "Yes"\n[2] button "No"',
    next_id=3,
    element_ids=[1, 2],
)
FORM = Observation(
    "Enter bob into the text field.",
    "u",
    '[1] textbox ""\n[2] button "Submit"',
    next_id=3,
    element_ids=[1, 2],
)


def _capture(tmp_path) -> str:
    path = tmp_path / "obs.json"
    rows = [
        {"task": "miniwob/click-button", "seed": 0, "obs": PAGE.to_dict()},
        {"task": "miniwob/enter-text", "seed": 0, "obs": FORM.to_dict()},
    ]
    path.write_text(json.dumps({"kind": "dynaweb-start-observations", "seed": 0, "tasks": rows}))
    return str(path)


def test_the_same_pages_compare_identical_and_a_changed_reader_does_not(tmp_path, capsys) -> None:
    obs = _capture(tmp_path)
    a, b = str(tmp_path / "a.json"), str(tmp_path / "b.json")
    assert snapshot(obs, a) == 0 and snapshot(obs, b) == 0
    snap = json.loads(open(a).read())
    row = snap["tasks"]["miniwob/click-button"]
    assert "click(1)" in row["candidates"] and row["expert"]["action"] == "click(1)", row
    assert compare(a, b) == 0
    assert "candidates identical 2/2" in capsys.readouterr().out
    row["candidates"] = row["candidates"][:-1]  # a reader that lost one candidate
    open(b, "w").write(json.dumps(snap))
    assert compare(a, b) == 1
    assert "candidates identical 1/2" in capsys.readouterr().out
