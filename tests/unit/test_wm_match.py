"""The world model's exact-match input feature (models/lm/match.py) and its heads' view of the
lines the instruction names (models/world_model/lines.py): which tokens and lines they take, that every
path that feeds a prompt in pieces (shared prefix + tails, the rerank trie) gives the same numbers
as one plain forward pass of the whole prompt, that both are trained, saved and restored, and
that a saved model comes back with its parameters in the same order (an optimizer's saved state
is matched by that order on resume)."""

from __future__ import annotations

import pytest
import torch

from core.config import ModelConfig
from core.spaces import Observation, parse_action
from models.lm.match import match_flags, match_line_positions, token_pieces
from models.lm.prompts import world_model_prompt_ids
from models.lm.saved import load_model, make_model
from models.lm.scoring import score_continuations
from models.lm.tokenizer import decode, encode, eos_id, pad_id
from models.world_model.decoding import generate_tokens
from models.world_model.heads import HeadPlaces, head_positions
from models.world_model.lines import line_positions
from models.world_model.model import WorldModel, WorldModelSpec, gather_rows

PAGE = Observation(
    'Enter "Emile" into the text field and press Submit.',
    "u",
    '[1] textbox value="Emile"\n[2] button "Submit"\n[3] text "Emilia"',
    next_id=4,
    element_ids=[1, 2, 3],
)
OTHER = Observation(
    "Select Kiribati from the list and click Submit.",
    "u",
    '[1] combobox value="Jordan"\n  option "Jordan" selected\n  option "Kiribati"\n[2] button "Submit"',
    next_id=3,
    element_ids=[1, 2],
)
CFG = ModelConfig(layers=1, d_model=64, heads=2, max_positions=320)


def _model(feature: bool = True, seed: int = 3):
    model, tok = make_model(
        WorldModel,
        ModelConfig(layers=1, d_model=64, heads=2, max_positions=320),
        WorldModelSpec(match_feature=feature, head_lines=feature),
    )
    if feature:
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():  # trained-looking weights: big enough to move every output
            model.match.weight.copy_(torch.randn(model.match.weight.shape, generator=g))
            ml = model.lines
            for w in (ml.proj.weight, ml.named_count.weight, ml.other_count.weight):
                w.copy_(torch.randn(w.shape, generator=g) * 0.3)
            ml.acted_max.weight.copy_(torch.randn(ml.acted_max.weight.shape, generator=g) * 0.3)
    return model.eval(), tok


def _flagged_words(tok, obs: Observation, action: str) -> list[str]:
    ids = world_model_prompt_ids(tok, obs, action, 320, 32)
    flags = match_flags(ids, token_pieces(tok))
    return [decode(tok, [i]) for i, f in zip(ids, flags, strict=True) if f]


def test_flags_mark_page_and_action_words_of_the_instruction_only():
    model, tok = _model()
    words = "".join(_flagged_words(tok, PAGE, "click(2)")).split()
    # "Emile" (the value) and "Submit" (the button) are in the instruction; "Emilia", "textbox",
    # "value", "button" and the instruction's own words are not flagged
    assert "".join(words).count("Emile") == 1 and "Submit" in "".join(words)
    assert "Emilia" not in "".join(words) and "textbox" not in "".join(words)
    typed = "".join(_flagged_words(tok, PAGE, 'type(1, "Emile")'))
    assert typed.count("Emile") == 2  # the page's value and the action's text
    # no "Task: " first line (a cached decoding step, a continuation): nothing is flagged
    ids = encode(tok, 'value="Emile"\nEnter "Emile"')
    assert not any(match_flags(ids, token_pieces(tok)))


def test_the_feature_is_zero_at_init_so_a_fresh_model_is_unchanged():
    with_f, tok = make_model(WorldModel, CFG)
    torch.manual_seed(0)
    without, _ = make_model(
        WorldModel,
        ModelConfig(layers=1, d_model=64, heads=2, max_positions=320),
        WorldModelSpec(match_feature=False),
    )
    ids = torch.tensor([world_model_prompt_ids(tok, PAGE, "click(2)", 320, 32)])
    assert with_f.spec.match_feature and not without.spec.match_feature
    assert torch.equal(with_f.match.weight, torch.zeros_like(with_f.match.weight))
    with torch.no_grad():
        assert torch.allclose(with_f(input_ids=ids).logits, without(input_ids=ids).logits)


def _prompts(tok) -> list[list[int]]:
    # rows 0-2 share their page (a shared prefix group), row 3 is another task
    return [
        world_model_prompt_ids(tok, PAGE, a, 320, 32)
        for a in ("click(2)", 'type(1, "Emile")', "click(3)")
    ] + [world_model_prompt_ids(tok, OTHER, "click(2)", 320, 32)]


def test_prefix_and_tail_prefill_equal_one_plain_forward_with_the_feature():
    """``generate_tokens`` feeds shared prefixes, then tails: the heads' input it returns and its
    first generated token equal those of a plain forward pass over each whole prompt."""
    model, tok = _model()
    prompts = _prompts(tok)
    positions = [head_positions(tok, p) for p in prompts]

    def generated() -> tuple[list, torch.Tensor]:
        with torch.no_grad():
            return generate_tokens(
                model,
                prompts,
                1,
                pad_id(tok),
                eos_id(tok),
                320,
                return_hidden=True,
                heads=HeadPlaces(positions, line_positions(model.lines, prompts)),
            )

    gen, hid = generated()
    ref_h, ref_tok, mean = [], [], []
    with torch.no_grad():
        for p, pos in zip(prompts, positions, strict=True):
            out = model(input_ids=torch.tensor([p]), output_hidden_states=True)
            lines = line_positions(model.lines, [p])
            h = gather_rows(out.hidden_states[-1])
            ref_h.append(model.head_input(h, HeadPlaces([pos], lines))[0])
            ref_tok.append(int(out.logits[0, -1].argmax()))
            mean.append(model.head_input(h, HeadPlaces([pos]))[0])
    assert torch.allclose(hid, torch.stack(ref_h), atol=1e-4)
    assert [g[0] for g in gen] == ref_tok
    # the named lines are in it: the plain mean alone differs
    assert not torch.allclose(hid, torch.stack(mean), atol=1e-3)
    # and the match feature matters: without it the heads' input differs
    with torch.no_grad():
        model.match.weight.zero_()
    _, plain = generated()
    assert not torch.allclose(hid, plain, atol=1e-3)


def test_rerank_scores_equal_one_plain_forward_with_the_feature():
    """``score_continuations`` (a shared prefix, then a trie of tails and candidates) scores each
    candidate as a plain forward pass over prompt + candidate does."""
    model, tok = _model()
    prompts = _prompts(tok)
    conts = [[encode(tok, c) + [eos_id(tok)] for c in ("why: x\nreward 0", "why: y")]] * 4
    with torch.no_grad():
        got = score_continuations(model, prompts, conts, 320, pad_id(tok))
        for p, cs, g in zip(prompts, conts, got, strict=True):
            for c, s in zip(cs, g.tolist(), strict=True):
                lp = torch.log_softmax(model(input_ids=torch.tensor([p + c])).logits[0], -1)
                ref = sum(float(lp[len(p) - 1 + j, t]) for j, t in enumerate(c))
                assert s == pytest.approx(ref, abs=1e-3)


def test_saved_and_restored_and_a_model_saved_without_it_loads_without_it(tmp_path):
    model, tok = _model()
    model.save_pretrained(tmp_path / "with")
    tok.save_pretrained(tmp_path / "with")
    again, _ = load_model(WorldModel, str(tmp_path / "with"))
    assert torch.equal(again.match.weight, model.match.weight)
    assert torch.equal(again.lines.proj.weight, model.lines.proj.weight)
    # the same parameters in the same order: a resumed optimizer's state lands on the right ones
    assert [(n, tuple(p.shape)) for n, p in again.named_parameters()] == [
        (n, tuple(p.shape)) for n, p in model.named_parameters()
    ]
    ids = torch.tensor([_prompts(tok)[0]])
    with torch.no_grad():
        assert torch.allclose(again(input_ids=ids).logits, model(input_ids=ids).logits, atol=1e-5)
    old, otok = _model(feature=False)
    old.save_pretrained(tmp_path / "old")
    otok.save_pretrained(tmp_path / "old")
    loaded, _ = load_model(WorldModel, str(tmp_path / "old"))
    assert loaded.match is None and not loaded.spec.match_feature
    assert loaded.lines is None and not loaded.spec.head_lines
    assert [n for n, _ in loaded.named_parameters()] == [n for n, _ in old.named_parameters()]


def test_the_trainers_loss_trains_the_feature_and_the_lines_layer():
    from core.config import TrainerConfig
    from models.world_model.loss import world_model_batch_loss
    from streams.records import Transition

    model, tok = make_model(WorldModel, CFG)
    t = Transition(
        run_id="r",
        episode_id="e",
        step=0,
        task="t",
        seed=0,
        source="real",
        policy_version=0,
        world_model_version=0,
        obs=PAGE.to_dict(),
        action="click(2)",
        next_obs=PAGE.to_dict(),
        reward=1.0,
        done=True,
    )
    loss, _ = world_model_batch_loss(model, tok, [t], TrainerConfig(infonce_weight=0.0))
    loss.backward()
    ml = model.lines
    layers = (ml.proj, ml.named_count, ml.other_count, ml.acted_max)
    for w in (model.match.weight, *(lay.weight for lay in layers)):
        assert w.grad is not None and float(w.grad.abs().sum()) > 0
    assert parse_action("click(2)").element == 2


def test_named_lines_are_the_page_lines_holding_an_instruction_word_with_their_state():
    _, tok = _model()
    pieces = token_pieces(tok)

    def lines(obs: Observation, action: str) -> str:
        ids = world_model_prompt_ids(tok, obs, action, 320, 32)
        return decode(tok, [ids[i] for i in match_line_positions(ids, pieces)])

    picked = OTHER.tree.replace('value="Jordan"', 'value="Kiribati"')
    picked = picked.replace('"Jordan" selected', '"Jordan"').replace(
        '"Kiribati"\n', '"Kiribati" selected\n'
    )
    right = Observation(OTHER.instruction, "u", picked, next_id=3, element_ids=[1, 2])
    got = lines(right, "click(2)")
    assert 'value="Kiribati"' in got and '"Kiribati" selected' in got and "Submit" in got
    wrong = lines(OTHER, "click(2)")  # the asked option is there, not selected: no value line
    assert "Jordan" not in wrong and '"Kiribati"' in wrong and "selected" not in wrong
    assert "Action" not in got and "Select" not in got  # not the action line, not the instruction
