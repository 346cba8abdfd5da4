"""The alert rules are valid (`promtool check rules`) and behave as their unit tests say
(`promtool test rules infra/monitoring/tests/*.yml`). Without promtool the test is skipped
locally and fails in CI (CI=true)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

MON = Path(__file__).resolve().parents[2] / "infra" / "monitoring"
RULES = sorted((MON / "rules").glob("*.yml"))
TESTS = sorted((MON / "tests").glob("*.yml"))
ALERTS = {
    "DynawebCollectorSilent",
    "DynawebTrainerStalled",
    "DynawebCheckpointNotAdvancing",
    "DynawebDeadLettersRising",
    "DynawebStaleDropsHigh",
    "DynawebWorldModelFidelityFalling",
    "DynawebConsumerLagGrowing",
}


def _promtool() -> str:
    found = shutil.which("promtool")
    if not found:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(
                "promtool is not installed (apt-get install -y --no-install-recommends prometheus)"
            )
        pytest.skip("promtool is not installed")
    return found


def _alerts() -> dict[str, dict]:
    out = {}
    for f in RULES:
        for g in yaml.safe_load(f.read_text())["groups"]:
            for r in g["rules"]:
                if "alert" in r:
                    out[r["alert"]] = r
    return out


def test_required_alerts_exist_with_labels_and_summary() -> None:
    alerts = _alerts()
    assert ALERTS <= set(alerts), ALERTS - set(alerts)
    for name, r in alerts.items():
        assert r["labels"]["severity"] in ("warning", "critical"), name
        assert "run" in r["annotations"]["summary"] or "$labels" in r["annotations"]["summary"], (
            name
        )
        assert "vector(" not in r["expr"], f"{name}: padded expression"


def test_every_alert_has_a_unit_test() -> None:
    tested = set()
    for f in TESTS:
        for t in yaml.safe_load(f.read_text())["tests"]:
            for a in t.get("alert_rule_test", []):
                if a.get("exp_alerts"):
                    tested.add(a["alertname"])
    assert set(_alerts()) <= tested, set(_alerts()) - tested


def test_promtool_check_rules() -> None:
    p = subprocess.run(
        [_promtool(), "check", "rules", *map(str, RULES)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 0, p.stdout + p.stderr


def test_promtool_test_rules() -> None:
    assert TESTS
    p = subprocess.run(
        [_promtool(), "test", "rules", *[t.name for t in TESTS]],
        cwd=MON / "tests",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stdout + p.stderr
