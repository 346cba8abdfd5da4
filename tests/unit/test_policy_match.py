"""The policy's exact-match feature (``ModelConfig.policy_match_feature``, off by default): the
page words that are words of the instruction are flagged up to the ``Action:`` line, never the
action the policy scores; the policy is built, saved and restored with it; and the probability
trained is still the probability sampled (log ratio 0 on-policy through the real acting and
learning code)."""

from __future__ import annotations

import dataclasses

import torch

from models.lm.match import END, match_flags, token_pieces
from models.lm.prompts import action_ids, policy_prompt_ids
from models.lm.saved import load_model, make_model
from models.lm.scoring import score_continuations
from models.lm.tokenizer import decode
from models.policy.model import Policy
from tests.factories import POLICY_CFG as CFG
from tests.factories import POLICY_PAGE as PAGE
from tests.factories import on_policy_loss

FEAT = dataclasses.replace(CFG, policy_match_feature=True)


def _featured(seed: int = 0):
    """A policy with the feature and a trained-looking vector (big enough to move every score)."""
    torch.manual_seed(seed)
    model, tok = make_model(Policy, FEAT)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        model.match.weight.copy_(torch.randn(model.match.weight.shape, generator=g))
    return model, tok


def test_page_words_are_flagged_up_to_the_action_line_never_the_action():
    model, tok = _featured()
    ids = policy_prompt_ids(tok, PAGE, ['type(6, "ab")'], CFG.max_positions)
    flags = model.prompt_flags([ids])[0]
    flagged = "".join(decode(tok, [i]) for i, f in zip(ids, flags, strict=True) if f)
    assert "OK" in flagged and "ab" in flagged  # the page's button, the history's typed text
    assert "Name" not in flagged and "Help" not in flagged  # not words of the instruction
    tail = decode(tok, ids[-4:])
    assert tail.endswith("Action: ") and not any(flags[-4:])
    # the action scored after the prompt is never flagged (it would be by the world model's rule)
    seq = ids + action_ids(tok, 'type(6, "ab")')
    pieces = token_pieces(tok)
    assert not any(model.match.flags(torch.tensor([seq]))[0, len(ids) :].tolist())
    assert any(match_flags(seq, pieces, END)[len(ids) :])
    assert model.spec.match_feature and not make_model(Policy, CFG)[0].spec.match_feature


def test_the_feature_moves_the_scores_and_is_saved_and_restored(tmp_path):
    model, tok = _featured()
    p = policy_prompt_ids(tok, PAGE, [], CFG.max_positions)
    conts = [action_ids(tok, t) for t in ("click(4)", "click(5)", 'type(6, "ab")')]
    with torch.no_grad():
        s = score_continuations(model, [p], [conts], CFG.max_positions, 0)[0]
        w = model.match.weight.clone()
        model.match.weight.zero_()
        plain = score_continuations(model, [p], [conts], CFG.max_positions, 0)[0]
        model.match.weight.copy_(w)
    assert not torch.allclose(s, plain, atol=1e-3)
    model.save_pretrained(tmp_path / "p")
    tok.save_pretrained(tmp_path / "p")
    again, atok = load_model(Policy, str(tmp_path / "p"))
    assert torch.equal(again.match.weight, w) and again.spec.match_feature
    with torch.no_grad():
        s2 = score_continuations(again, [p], [conts], CFG.max_positions, 0)[0]
    assert torch.allclose(s, s2, atol=1e-5)
    # a policy saved without it loads without it
    old, otok = make_model(Policy, CFG)
    old.save_pretrained(tmp_path / "old")
    otok.save_pretrained(tmp_path / "old")
    loaded, _ = load_model(Policy, str(tmp_path / "old"))
    assert loaded.match is None
    # make_model from a directory restores it too
    from_dir, _ = make_model(Policy, dataclasses.replace(CFG, policy_path=str(tmp_path / "p")))
    assert torch.equal(from_dir.match.weight, w)


def test_on_policy_log_ratio_is_zero_through_the_learner_with_the_feature():
    """Acting scores shared prefixes and tries (flags handed to each pass); the learner scores
    whole sequences: the same numbers, so every per-decision log ratio is 0, and the feature's
    vector gets a gradient."""
    model, tok = _featured(seed=3)
    loss = on_policy_loss(model, tok, FEAT)
    loss.backward()
    g = model.match.weight.grad
    assert g is not None and float(g.abs().sum()) > 0


def test_the_study_setting_reaches_every_arms_policy_and_only_an_on_setting_changes_the_id():
    from core.config import Config
    from evaluation.studies.sample_efficiency.arms import (
        cell_config,
        experiment_id,
        resolve_experiment,
    )
    from evaluation.studies.sample_efficiency.config import SampleEfficiencyConfig

    ex = resolve_experiment(SampleEfficiencyConfig(), quick=False)
    frozen = experiment_id(ex)
    assert not cell_config(Config(), ex, "r", "real_only", 0).model.policy_match_feature
    ex.policy_match_feature = True
    assert experiment_id(ex) != frozen
    for arm in ("imitation", "imitation_matched", "real_only", "dynaweb", "dynaweb_dream_only"):
        assert cell_config(Config(), ex, "r", arm, 0).model.policy_match_feature, arm
    ex.policy_match_feature = False
    assert experiment_id(ex) == frozen
