"""``dynaweb bench reload``'s arithmetic: quantiles, first use per version, mixed groups."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from evaluation.bench.reload import FirstUse, quantile
from streams import records
from streams.topics import Topics


def test_quantile_interpolates() -> None:
    assert quantile([], 0.5) is None
    assert quantile([3.0], 0.95) == 3.0
    assert quantile([1.0, 2.0, 3.0, 4.0], 0.5) == pytest.approx(2.5)
    assert quantile([float(x) for x in range(1, 101)], 0.95) == pytest.approx(95.05)


def _msg(t: records.Transition, ts_ms: int) -> SimpleNamespace:
    return SimpleNamespace(value=records.encode(t), timestamp=ts_ms)


def _t(source: str, step: int, version: int, group: str, at: float = 0.0) -> records.Transition:
    return records.Transition(
        run_id="r", episode_id=f"e-{group}-{step}", step=step, task="miniwob/click-button",
        seed=0, source=source, policy_version=version, world_model_version=0,
        obs={"instruction": "i", "tree": "[1] a"},
        action="click(1)", next_obs={"instruction": "i", "tree": "[1] a"}, reward=0.0, done=False,
        group_id=group, created_at=at,
    )  # fmt: skip


def test_first_use_per_version_and_groups_mixing_versions() -> None:
    topics = Topics("r")
    fu = FirstUse(SimpleNamespace(kafka=None), topics)
    # a round's records are sent together when it ends (6 s); its groups started when their
    # step 0 was dreamed (4.5 s for g0, 4.0 s for g1)
    fu._note(topics.dream, _msg(_t("dream", 0, 1, "g0", at=4.5), 6_000))
    fu._note(topics.dream, _msg(_t("dream", 1, 1, "g0", at=5.5), 6_000))
    fu._note(topics.dream, _msg(_t("dream", 0, 1, "g1", at=4.0), 6_001))
    fu._note(topics.dream, _msg(_t("dream", 1, 1, "g1", at=5.0), 6_001))
    fu._note(topics.real, _msg(_t("real", 3, 2, "g2"), 7_000))  # not an episode start
    fu._note(topics.real, _msg(_t("real", 0, 2, "g2"), 8_000))
    fu._note(topics.real, _msg(_t("real", 0, 5, "g2"), 9_000))  # g2 spans versions 2..5
    fu._note(topics.real, _msg(records.encode(records.Control("r", "x", "y", 0.0)), 1))
    assert fu.used("dream", 1) == 4.0 and fu.used("dream", 2) is None
    assert fu.used("dream_published", 1) == 6.0
    assert fu.used("live", 2) == 8.0 and fu.used("live", 5) == 9.0
    assert fu.mixed_groups(max_staleness=2) == 1 and fu.mixed_groups(max_staleness=3) == 0
    assert fu.mixed_detail(max_staleness=2) == [
        {"group": "g2", "source": "live", "versions": [2, 5]}
    ]


def test_the_bench_uploads_the_trainers_state_beside_the_weights(tmp_path) -> None:
    """The bench's checkpoints are the size of the trainer's: the module and Adam's two moments
    beside ``hf/`` (a reader that fetched them would pay for it in the bench too)."""
    import torch

    from evaluation.bench.reload import _trainer_state

    model = torch.nn.Linear(64, 64)
    _trainer_state(model, tmp_path / "state" / "ds")
    weights = sum(p.numel() * 4 for p in model.parameters())
    size = (tmp_path / "state" / "ds" / "mp_rank_00_model_states.pt").stat().st_size
    assert 3 * weights <= size < 3 * weights + 64 * 1024
    assert (tmp_path / "state" / "latest").read_text() == "ds"


def test_cpu_seconds_of_named_processes() -> None:
    import os

    from evaluation.bench.streams import cpu_seconds

    sum(i * i for i in range(200_000))  # some CPU of our own
    got = cpu_seconds({"me": [os.getpid()], "gone": [2**22 + 12345]})
    assert got["me"] > 0 and got["gone"] == 0.0


def test_load_phases_reads_the_readers_own_lines_past_version_0() -> None:
    import logging

    from evaluation.bench.reload import load_phases
    from models.checkpoints.reader import LOADED_LINE

    lines = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(self.format(record))

    log = logging.getLogger("models.checkpoints.reader")
    h = Keep()
    log.addHandler(h)
    old = log.level
    log.setLevel(logging.INFO)
    try:  # the reader's own line, as ModelSlot._prepare writes it
        fmt = LOADED_LINE
        log.info(fmt, "policy", 0, 9.0, 1.0, 0.0, 0.0, 4.0, 4.0)  # version 0: not a reload
        log.info(fmt, "policy", 1, 0.9, 0.1, 0.0, 0.01, 0.02, 0.77)
        log.info(fmt, "policy", 2, 1.1, 0.3, 0.0, 0.01, 0.02, 0.77)
        log.info(fmt, "world_model", 1, 1.3, 0.1, 0.3, 0.01, 0.02, 0.87)
    finally:
        log.removeHandler(h)
        log.setLevel(old)
    got = load_phases("\n".join(lines))
    assert got["policy"]["download"] == 0.2 and got["policy"]["total"] == 1.0
    assert got["world_model"]["held"] == 0.3 and got["world_model"]["load"] == 0.87
