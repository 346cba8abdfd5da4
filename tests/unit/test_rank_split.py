"""A data-parallel trainer's batch split (``models.train.data_parallel``): every item of a batch goes to
exactly one rank, the shares together are the batch, and the ranks' losses and gradients on their
shares add up to the whole batch's (policy: GSPO + BC; world model: LM + InfoNCE + heads), their
reports merged into the whole batch's."""

from __future__ import annotations

import pytest
import torch

from core.config import TrainerConfig
from core.launch import exit_text, rank_env
from models.lm.saved import make_model
from models.policy.loss import policy_batch_loss
from models.policy.model import Policy
from models.policy.runner import PolicyRunner
from models.train.data_parallel import (
    RankLost,
    merge_policy_stats,
    merge_wm_stats,
    rank_indices,
    rank_share,
)
from models.world_model.loss import world_model_batch_loss
from streams.records import TrainingBatch
from tests.factories import POLICY_CFG as CFG
from tests.factories import POLICY_OBS as OBS
from tests.factories import FakeEmbedder, policy_rollout, policy_trajectory, wm_batch, wm_model


@pytest.mark.parametrize("world", [1, 2, 3, 4, 7])
def test_every_item_goes_to_exactly_one_rank(world: int) -> None:
    for n in range(0, 23):
        shares = [rank_indices(n, r, world) for r in range(world)]
        flat = [i for s in shares for i in s]
        assert sorted(flat) == list(range(n))  # none skipped
        assert len(flat) == len(set(flat))  # none trained twice
        assert all(s == sorted(s) for s in shares)  # batch order kept within a share
        assert max(map(len, shares)) - min(map(len, shares)) <= 1  # balanced
        assert all(i % world == r for r, s in enumerate(shares) for i in s)  # r, r + N, ...


def test_a_training_batch_is_split_by_trajectory() -> None:
    trajs = [policy_trajectory([(OBS[k % 3], "click(2)")], "expert", "", 1.0) for k in range(5)]
    for k, t in enumerate(trajs):
        t.episode_id = f"e{k}"
    batch = TrainingBatch(
        run_id="r",
        batch_id="b",
        worker_id="w",
        kind="expert_only",
        trajectories=[vars(t) for t in trajs],
        expert_fraction=1.0,
    )
    got = batch.trajs()
    shares = [[t.episode_id for t in rank_share(got, r, 2)] for r in range(2)]
    assert shares == [["e0", "e2", "e4"], ["e1", "e3"]]
    assert rank_share(got, 0, 1) == got


def test_bad_ranks_are_refused() -> None:
    for rank, world in ((2, 2), (-1, 2), (0, 0)):
        with pytest.raises(ValueError):
            rank_indices(4, rank, world)


def _grads(model: torch.nn.Module) -> dict:
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


def _batch(model, tok) -> list:
    """A GSPO group of four dreams (behaviour log-probs of the policy that made them) and two
    expert trajectories, interleaved so both ranks get both kinds."""
    r = PolicyRunner(model, tok, CFG, seed=3)
    trajs = []
    for k in range(4):
        steps, lps = policy_rollout(r, OBS[k % 3], 2)
        trajs.append(policy_trajectory(steps, "dream", "g", float(k % 2), lps))
        if k % 2:
            pairs = [(OBS[k % 3], 'type(1, "Kiera")'), (OBS[0], "click(2)")]
            trajs.append(policy_trajectory(pairs, "expert", "", 1.0))
    return trajs


@pytest.mark.parametrize("chunk_rows", [0, 2])
def test_policy_shares_add_up_to_the_whole_batch(chunk_rows: int) -> None:
    torch.manual_seed(0)
    model, tok = make_model(Policy, CFG)
    trajs = _batch(model, tok)
    cfg = TrainerConfig(chunk_rows=chunk_rows)

    def run(select=None) -> tuple:
        model.zero_grad(set_to_none=True)
        chunked = chunk_rows > 0
        loss, stats = policy_batch_loss(
            model, tok, trajs, cfg, CFG, backward=chunked, chunk_rows=max(1, chunk_rows),
            select=select,
        )  # fmt: skip
        if not chunked and loss.requires_grad:
            loss.backward()
        return float(loss.detach()), stats, _grads(model)

    whole_loss, whole, g_whole = run()
    assert whole["n_gspo"] == 4 and whole["n_bc"] == 2 and whole["clip_frac"] >= 0
    for world in (2, 3):
        parts = [run(rank_indices(len(trajs), r, world)) for r in range(world)]
        assert abs(sum(p[0] for p in parts) - whole_loss) < 1e-5
        summed = {k: sum(p[2][k] for p in parts if k in p[2]) for k in g_whole}
        assert set().union(*(p[2] for p in parts)) == set(g_whole)
        for k, g in g_whole.items():
            assert torch.allclose(summed[k], g, atol=1e-6, rtol=1e-4), k
        merged = merge_policy_stats([p[1] for p in parts])
        for k in ("loss", "gspo_loss", "bc_loss", "clip_frac", "kl", "ratio_mean", "ratio_min",
                  "ratio_max", "cand_per_step", "decisions", "n_gspo", "n_bc", "adv_abs"):  # fmt: skip
            assert merged[k] == pytest.approx(whole[k], abs=1e-5), k
        assert merged["log_ratios"] == pytest.approx(whole["log_ratios"], abs=1e-5)
        for src, s in whole["by_source"].items():
            for k, v in s.items():
                assert merged["by_source"][src][k] == pytest.approx(v, abs=1e-5), (src, k)


@pytest.mark.parametrize("backward", [False, True])
def test_world_model_shares_add_up_to_the_whole_batch(backward: bool) -> None:
    torch.manual_seed(0)
    model = wm_model()
    batch = wm_batch()
    cfg = TrainerConfig(infonce_weight=0.5)

    def run(select=None) -> tuple:
        model.zero_grad(set_to_none=True)
        loss, m = world_model_batch_loss(
            model, model._tok, batch, cfg, FakeEmbedder(), 64, backward=backward, chunk_rows=2,
            select=select,
        )  # fmt: skip
        if not backward and loss.requires_grad:
            loss.backward()
        return m, _grads(model)

    whole, g_whole = run()
    assert whole["infonce"] > 0 and any(k.startswith("page_head") for k in g_whole)
    for world in (2, 3):
        parts = [run(rank_indices(len(batch), r, world)) for r in range(world)]
        summed = {k: sum(p[1][k] for p in parts if k in p[1]) for k in g_whole}
        for k, g in g_whole.items():
            assert torch.allclose(summed[k], g, atol=1e-6, rtol=1e-4), k
        merged = merge_wm_stats([p[0] for p in parts])
        for k in ("loss", "lm_loss", "infonce", "reward_head_loss", "done_head_loss",
                  "reward_head_acc", "done_head_acc", "n", "reward_positive_share"):  # fmt: skip
            assert merged[k] == pytest.approx(whole[k], abs=1e-5), k


def test_the_launcher_environment_and_exit_words() -> None:
    env = rank_env(1, 2, 29500)
    assert env["RANK"] == env["LOCAL_RANK"] == "1" and env["WORLD_SIZE"] == "2"
    assert env["MASTER_ADDR"] == "127.0.0.1" and env["MASTER_PORT"] == "29500"
    assert exit_text(-9) == "was killed by SIGKILL" and exit_text(1) == "exited with 1"


def test_a_lost_rank_is_named() -> None:
    e = RankLost(0, 2, [1], "RuntimeError: Connection closed by peer")
    assert "trainer rank 0 of 2: rank 1 is lost" in str(e)
    assert "could not be told" in str(RankLost(1, 3, [], "timeout"))
