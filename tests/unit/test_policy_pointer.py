"""The policy's element pointer (``ModelConfig.policy_pointer``, on by default): which page line an
action points at, that the term moves exactly the scores of the actions naming an element, that it is
saved and restored, that it starts at zero, and that the probability trained is still the probability
sampled (log ratio 0 on-policy through the real acting and learning code, with a gradient on ``w``)."""

from __future__ import annotations

import dataclasses
import logging

import torch

from models.lm.match import token_pieces
from models.lm.prompts import policy_prompt_ids
from models.lm.saved import load_model, make_model
from models.lm.scoring import score_continuations
from models.lm.tokenizer import decode
from models.policy.element_head import (
    NAMED_GAIN,
    acted_element,
    element_lines,
    element_scores,
    prompt_states,
)
from models.policy.model import Policy
from models.policy.runner import PolicyRunner
from tests.factories import POLICY_CFG as CFG
from tests.factories import POLICY_PAGE as PAGE
from tests.factories import on_policy_loss

PTR = dataclasses.replace(CFG, policy_pointer=True)
PLAIN = dataclasses.replace(CFG, policy_pointer=False)
BOTH = dataclasses.replace(PTR, policy_match_feature=True)


def _pointed(cfg=PTR, seed: int = 0):
    """A policy with the pointer and a trained-looking vector (big enough to move every score)."""
    torch.manual_seed(seed)
    model, tok = make_model(Policy, cfg)
    g = torch.Generator().manual_seed(seed)
    w = model.element_head.proj.weight
    with torch.no_grad():
        w.copy_(torch.randn(w.shape, generator=g))
        model.element_head.named.fill_(1.5 / NAMED_GAIN)
    return model, tok


def test_an_action_points_at_the_line_of_the_element_it_names():
    assert acted_element("click(4)") == "4" and acted_element('type(6, "ab")') == "6"
    assert acted_element("stop") is None and acted_element("press(Enter)") is None
    model, tok = make_model(Policy, PTR)
    ids = policy_prompt_ids(tok, PAGE, ["click(5)"], CFG.max_positions)
    lines = element_lines(ids, token_pieces(tok))
    assert sorted(lines, key=int) == ["4", "5", "6", "7", "8", "9"]
    text = {k: "".join(decode(tok, [ids[q]]) for q in v) for k, (_, v) in lines.items()}
    named = {k for k, (hit, _) in lines.items() if hit}
    assert named == {"4"}  # "OK" is a word of the instruction; "Name", "Help", "M" are not
    assert "OK" in text["4"] and "Help" not in text["4"] and "Help" in text["5"]
    assert "option" in text["9"] and '"M"' in text["9"]
    # the history's "click(5)" and the instruction are never a line
    assert element_lines(ids[5:], token_pieces(tok)) == {}  # not a prompt


def test_the_pointer_starts_at_zero_moves_only_element_actions_and_is_saved(tmp_path):
    model, tok = make_model(Policy, PTR)
    assert (
        float(model.element_head.proj.weight.detach().abs().sum()) == 0.0
    )  # a new pointer: no change
    acts = ["click(4)", "click(5)", 'type(6, "ab")', "stop", "click(99)"]
    p = policy_prompt_ids(tok, PAGE, [], CFG.max_positions)
    assert element_scores(model, model.element_head, [p], [acts])[0].abs().sum() == 0
    model, tok = _pointed()
    t = element_scores(model, model.element_head, [p], [acts])[0]
    assert (t[:3] != 0).all() and t[3] == 0 and t[4] == 0  # stop, an element not on the page: 0
    # the term is w . the max of the line's states, from a plain forward of the prompt
    h = prompt_states(model, [p])[0]
    ptr = model.element_head
    for k, n in (("4", 0), ("5", 1)):  # line 4 holds "OK", a word of the instruction
        named, q = element_lines(p, token_pieces(tok))[k]
        want = float(h[q].max(0).values @ ptr.proj.weight[0]) + named * NAMED_GAIN * float(
            ptr.named
        )
        assert abs(float(t[n]) - want) < 1e-5
    with torch.no_grad():
        ptr.named.add_(3.0 / NAMED_GAIN)
    t3 = element_scores(model, model.element_head, [p], [acts])[0]
    assert abs(float(t3[0] - t[0]) - 3.0) < 1e-5 and torch.allclose(t3[1:], t[1:])
    model.save_pretrained(tmp_path / "p")
    tok.save_pretrained(tmp_path / "p")
    again, _ = load_model(Policy, str(tmp_path / "p"))
    assert again.spec.element_head
    assert torch.allclose(element_scores(again, again.element_head, [p], [acts])[0], t3, atol=1e-5)
    plain, ptok = make_model(Policy, PLAIN)
    assert (
        element_scores(plain, plain.element_head, [p], [acts]) is None
        and not plain.spec.element_head
    )
    plain.save_pretrained(tmp_path / "old")
    ptok.save_pretrained(tmp_path / "old")
    assert load_model(Policy, str(tmp_path / "old"))[0].element_head is None


def test_loading_reports_only_the_weights_nobody_restores(tmp_path):
    """The element head's weights are the policy's own (``parts.safetensors``), so Hugging Face's
    loader of the backbone does not report them as unexpected.  A weight nothing restores, inside
    the backbone's file, still is."""
    records: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda r: records.append(r.getMessage())  # type: ignore[method-assign]
    hf = logging.getLogger("transformers")
    hf.addHandler(handler)
    try:
        model, tok = _pointed()
        model.save_pretrained(tmp_path / "p")
        tok.save_pretrained(tmp_path / "p")
        again, _ = load_model(Policy, str(tmp_path / "p"))
        assert type(again).__name__ == type(model).__name__ and again.spec.element_head
        assert not [m for m in records if "LOAD REPORT" in m], records
        model.lm.stray = torch.nn.Linear(2, 1)  # a module no loader restores
        model.save_pretrained(tmp_path / "s")
        tok.save_pretrained(tmp_path / "s")
        load_model(Policy, str(tmp_path / "s"))
        reports = [m for m in records if "LOAD REPORT" in m]
        assert len(reports) == 1 and "stray.weight" in reports[0]
        assert "element_head" not in reports[0]
    finally:
        hf.removeHandler(handler)


def test_acting_reads_the_prompt_states_from_its_scoring_passes():
    """``score_continuations(states=...)`` returns each prompt's last-layer states from the passes
    that score its candidates (a shared prefix, then the tails' trie nodes, in one round or
    several): the states of a plain forward of the prompt.  Acting with the pointer then runs no
    forward beyond those of acting without it."""
    model, tok = _pointed()
    hists = [[], ["click(4)"], ["click(5)", 'type(6, "ab")']]
    prompts = [policy_prompt_ids(tok, PAGE, h, CFG.max_positions) for h in hists]
    conts = [[tok.encode(a) for a in ("click(4)", "click(5)", "stop")] for _ in prompts]
    for group in ([0, 1, 2], [2]):  # a shared prefix; a prompt alone (no prefix pass)
        ps, cs = [prompts[i] for i in group], [conts[i] for i in group]
        for room in (CFG.max_positions, max(len(p) for p in ps) + 3):  # one round; several
            got: list = [None] * len(ps)
            scores = score_continuations(model, ps, cs, room, 0, states=got)
            assert all(
                torch.equal(a, b)
                for a, b in zip(scores, score_continuations(model, ps, cs, room, 0), strict=True)
            )
            for h, p, want in zip(got, ps, prompt_states(model, ps), strict=True):
                assert h.shape == (len(p), model.config.hidden_size)
                assert torch.allclose(h, want, atol=1e-4), float((h - want).abs().max())
    calls = []
    hook = model.register_forward_hook(lambda *_: calls.append(1))
    runner = PolicyRunner(model, tok, PTR, seed=0)
    runner.act_info([PAGE] * 3, hists, temperature=1.0)
    with_ptr = len(calls)
    ptr, model.element_head = model.element_head, None
    calls.clear()
    runner.act_info([PAGE] * 3, hists, temperature=1.0)
    model.element_head = ptr
    hook.remove()
    assert with_ptr == len(calls) > 0


def test_acting_samples_what_the_pointer_says():
    """A large pointer term on one element's line makes acting pick that element."""
    model, tok = make_model(Policy, PTR)
    p = policy_prompt_ids(tok, PAGE, [], CFG.max_positions)
    h = prompt_states(model, [p])[0]
    q5 = element_lines(p, token_pieces(tok))["5"][1]
    direction = h[q5].max(0).values - h.mean(0)
    with torch.no_grad():
        model.element_head.proj.weight.copy_(50 * direction / direction.norm())
    r = PolicyRunner(model, tok, PTR, seed=0)
    a, lp, _, _ = r.act_info([PAGE], [[]], temperature=0.0)[0]
    assert a.to_text() == "click(5)" and lp > -1.0


def test_on_policy_log_ratio_is_zero_through_the_learner_with_the_pointer():
    """Acting adds the term from the states of the passes that score its candidates; the learner
    from the states of the packed rows it scores: the same numbers, so every per-decision log ratio is 0, and ``w`` (and the
    match feature's vector, with both) gets a gradient."""
    for cfg in (PTR, BOTH):
        model, tok = _pointed(cfg, seed=3)
        loss = on_policy_loss(model, tok, cfg)
        loss.backward()
        g = model.element_head.proj.weight.grad
        assert g is not None and float(g.abs().sum()) > 0
        assert float(model.element_head.named.grad.abs().sum()) > 0
        if cfg.policy_match_feature:
            assert float(model.match.weight.grad.abs().sum()) > 0


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
    assert Config().model.policy_pointer  # the product's policy has it (zero at init)...
    assert not cell_config(
        Config(), ex, "r", "real_only", 0
    ).model.policy_pointer  # ...the study not
    ex.policy_pointer = True
    assert experiment_id(ex) != frozen
    for arm in ("imitation", "imitation_matched", "real_only", "dynaweb", "dynaweb_dream_only"):
        assert cell_config(Config(), ex, "r", arm, 0).model.policy_pointer, arm
    ex.policy_pointer = False
    assert experiment_id(ex) == frozen
