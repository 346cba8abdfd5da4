"""The sample-efficiency study's experiment ids are stable: the same settings give the same id
whatever the config's layout (results folders under docs/results/ are named by them)."""

from __future__ import annotations

import pytest

from evaluation.studies.sample_efficiency.arms import experiment_id, resolve_experiment
from infra.cli import build_parser, resolve

POINTER_STUDY = [  # docs/results/sample-efficiency-pointer/results.md's command line
    "--set=experiment.online_policy_steps=100",
    "--set=experiment.eval_seed_start=7000000",
    "--set=experiment.eval_seeds_per_task=100",
    "--set=experiment.budget=[900]",
    '--set=experiment.arms=["imitation","imitation_matched","real_only"]',
    "--set=experiment.seeds=[31,32,33,34]",
    "--set=experiment.policy_pointer=true",
]


@pytest.mark.parametrize(
    ("sets", "quick", "expected"),
    [
        ([], False, "sead4b4f"),  # the defaults: docs/results/sample-efficiency
        ([], True, "se4984ba"),  # --quick
        (POINTER_STUDY, False, "se0cf8da"),  # docs/results/sample-efficiency-pointer(-rerun)
        (
            ["--set=experiment.online_policy_steps=100", "--set=experiment.policy_pointer=true"],
            False,
            "se97862a",
        ),
    ],
)
def test_experiment_id_is_pinned(
    sets: list[str], quick: bool, expected: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for k in [k for k in __import__("os").environ if k.startswith("DYNAWEB_")]:
        monkeypatch.delenv(k)
    args = build_parser().parse_args(
        ["experiment", "sample-efficiency", "--out", "/tmp/unused", *sets]
    )
    assert experiment_id(resolve_experiment(resolve(args), quick)) == expected
