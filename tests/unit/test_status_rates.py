"""``dynaweb status``'s rates are over the time actually observed (``infra.status.observed_rate``):
a run younger than the window is not divided by the whole window."""

from __future__ import annotations

import pytest

from infra.status import gather, observed_rate

pytestmark = pytest.mark.unit

NOW = 10_000.0


class RateProm:
    """Answers an ``increase(...)`` query with the series of the first key it contains; nothing
    else."""

    url = "http://prom.test"

    def __init__(self, series: dict[str, list[tuple[dict, float]]]):
        self.series, self.queries = series, []

    def query(self, expr: str, at: float | None = None) -> list[dict]:
        self.queries.append(expr)
        if not expr.startswith("increase("):
            return []
        for key, rows in self.series.items():
            if key in expr:
                return [{"metric": m, "value": [at, str(v)]} for m, v in rows]
        return []

    def by(self, expr: str, label: str, at: float | None = None) -> dict:
        return {}

    def value(self, expr: str, at: float | None = None) -> float | None:
        return None


def test_a_run_younger_than_the_window_is_divided_by_its_age() -> None:
    # a trainer at 1,550 updates/h, 3 minutes old, read over 10 minutes
    prom = RateProm({"dynaweb_trainer_steps_total": [({"registered_at": str(NOW - 180)}, 77.5)]})
    per_s = observed_rate(prom, "dynaweb_trainer_steps_total", 600, at=NOW)[""]
    assert 3600 * per_s == pytest.approx(1550)  # rate() over the window said 465
    assert prom.queries == ["increase(dynaweb_trainer_steps_total[600s])"]


def test_an_older_run_and_a_restart_are_over_the_whole_window() -> None:
    rows = [
        ({"registered_at": str(NOW - 3600), "collector": "a"}, 300.0),  # older than the window
        ({"registered_at": str(NOW - 100), "collector": "a"}, 60.0),  # its restart
        ({"registered_at": str(NOW - 30), "collector": "b"}, 15.0),  # a young one
        ({"collector": "c"}, 6.0),  # no label: the window
    ]
    rates = observed_rate(RateProm({"steps": rows}), "steps", 600, at=NOW, by="collector")
    assert rates == {"a": pytest.approx(360 / 600), "b": pytest.approx(0.5), "c": 0.01}
    assert observed_rate(RateProm({}), "steps", 600, at=NOW) == {}


def test_status_reports_the_learner_rate_of_a_young_run() -> None:
    young = [({"registered_at": str(NOW - 180)}, 77.5)]
    prom = RateProm({'steps_total{run="r1", model="policy"}[600s]': young})
    s = gather(prom, "r1", at=NOW)
    assert s["trainer"]["policy_updates_per_h"] == pytest.approx(1550)
    assert s["trainer"]["world_model_updates_per_h"] is None


class TrustProm(RateProm):
    """Answers the per-task trust query with two tasks' measures."""

    ROWS = {
        ("miniwob/click-tab", "balanced_accuracy"): 0.82,
        ("miniwob/click-tab", "calibration_gap"): 0.04,
        ("miniwob/click-tab", "predicted"): 0.5,
        ("miniwob/click-tab", "real"): 0.46,
        ("miniwob/click-tab", "episodes"): 50,
        ("miniwob/click-tab", "gated"): 1,
        ("miniwob/click-checkboxes", "balanced_accuracy"): 0.51,
        ("miniwob/click-checkboxes", "gated"): 0,
    }

    def query(self, expr: str, at: float | None = None) -> list[dict]:
        if "dynaweb_trainer_task_trust" not in expr:
            return super().query(expr, at)
        return [
            {"metric": {"task": t, "measure": m}, "value": [at, str(v)]}
            for (t, m), v in self.ROWS.items()
        ]


def test_status_shows_each_tasks_trust() -> None:
    from infra.status import render

    s = gather(TrustProm({}), "r", at=NOW)
    assert s["task_trust"]["miniwob/click-tab"]["gated"] == 1.0
    assert s["task_trust"]["miniwob/click-checkboxes"] == {"balanced_accuracy": 0.51, "gated": 0.0}
    text = render(s)
    tab = next(line for line in text.splitlines() if "miniwob/click-tab" in line)
    assert "trusted" in tab and "balanced accuracy 0.82" in tab
    assert "predicted 50" in tab and "(gap 0.04)" in tab and "over 50 episodes" in tab
    boxes = next(line for line in text.splitlines() if "click-checkboxes" in line)
    assert "held back" in boxes and boxes.startswith("trust")  # the first, sorted by task
