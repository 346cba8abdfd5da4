"""The change head (models.world_model.proposals): labels, choice among offered kinds, and its effect on
the world model's predictions after training through the trainer's loss (decode="head")."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from core.config import DreamConfig, ModelConfig, TrainerConfig
from core.spaces import Observation, parse_action
from models.lm.saved import load_model, make_model
from models.world_model.loss import world_model_batch_loss
from models.world_model.model import WorldModel
from models.world_model.proposals import KINDS, OTHER, change_label, choose, proposals
from models.world_model.runner import WorldModelRunner
from streams.records import Transition
from tests.factories import wm_transition

PAGE = Observation(
    "Tick a, type hi, pick B.",
    "u",
    '[1] checkbox "a"\n[2] textbox value="x"\n[3] combobox value="A"\n  option "A" selected\n  option "B"',
    next_id=4,
    element_ids=[1, 2, 3],
)
TICKED = PAGE.tree.replace('checkbox "a"', 'checkbox "a" checked')
TYPED = PAGE.tree.replace('value="x"', 'value="a long typed string"')
PICKED = '[1] checkbox "a"\n[2] textbox value="x"\n[3] combobox value="B"\n  option "A"\n  option "B" selected'


def test_labels_name_the_first_proposal_that_is_the_real_page():
    kinds = dict(proposals(PAGE, parse_action("click(1)")))
    assert kinds["same"] == PAGE.tree and kinds["empty"] == "" and kinds["checked"] == TICKED
    assert "value" not in kinds and "option" not in kinds  # a click sets no value
    assert change_label(PAGE, parse_action("click(1)"), TICKED) == KINDS.index("checked")
    assert change_label(PAGE, parse_action("click(1)"), PAGE.tree) == KINDS.index("same")
    typed = parse_action('type(2, "a long typed string")')
    assert change_label(PAGE, typed, TYPED) == KINDS.index("value")
    assert change_label(PAGE, parse_action('select(3, "B")'), PICKED) == KINDS.index("option")
    assert change_label(PAGE, parse_action("click(1)"), "[9] heading 'New'") == OTHER
    assert change_label(PAGE, None, PAGE.tree) == KINDS.index("same")


class _Head:
    """A change head that scores the kinds by a fixed vector (its logits go to ``choose``)."""

    def __init__(self, scores: list[float]):
        lin = torch.nn.Linear(1, len(KINDS))
        with torch.no_grad():
            lin.weight.zero_()
            lin.bias.copy_(torch.tensor(scores))
        self.change_head = lin


def test_choose_picks_the_best_kind_the_row_offers_or_other():
    scores = [0.0] * len(KINDS)
    scores[KINDS.index("value")] = 5.0  # best overall, but a click offers no value
    scores[KINDS.index("checked")] = 3.0
    h = torch.zeros(2, 1)
    picks = choose(
        _Head(scores).change_head(h).detach(),
        [PAGE, PAGE],
        [parse_action("click(1)"), parse_action('type(2, "z")')],
    )
    assert picks[0] == TICKED and picks[1] == PAGE.tree.replace('value="x"', 'value="z"')
    scores[OTHER] = 9.0
    logits = _Head(scores).change_head(h[:1]).detach()
    assert choose(logits, [PAGE], [parse_action("click(1)")]) == [None]


def _tr(act: str, nxt: str, i: int) -> Transition:
    return wm_transition(PAGE, act, dataclasses.replace(PAGE, tree=nxt), 0.0, False, i)


ACTS = ["click(1)", 'type(2, "a long typed string")', 'select(3, "B")', 'scroll("down")']
NXTS = [TICKED, TYPED, PICKED, PAGE.tree]


def _trained_on_four_edits() -> tuple:
    """A small world model trained 40 steps through the trainer's loss on four actions of
    ``PAGE`` (a tick, a typed value, a chosen option, nothing): (model, tokenizer, last metrics)."""
    torch.manual_seed(0)
    model, tok = make_model(
        WorldModel, ModelConfig(layers=1, d_model=64, heads=2, max_positions=320)
    )
    batch = [_tr(a, n, i) for i, (a, n) in enumerate(zip(ACTS, NXTS, strict=True))]
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for _ in range(40):
        opt.zero_grad()
        loss, m = world_model_batch_loss(model, tok, batch, TrainerConfig(infonce_weight=0.0))
        loss.backward()
        opt.step()
        model.mark_heads_trained(change_head=True)  # as the trainer does after a step
    return model, tok, m


def test_a_trained_change_head_makes_the_edit_the_text_could_not(tmp_path):
    """Through the trainer's loss: the head learns which proposal each action gives, and
    ``decode="head"`` then predicts the exact page, saved and loaded with the model; the text
    decoder of the same barely trained model does not produce those edits."""
    model, tok, m = _trained_on_four_edits()
    assert m["change_head_acc"] == 1.0 and model.state.change_head_trained
    head = WorldModelRunner(model, tok, DreamConfig(max_change_tokens=8, wm_decode="head"))
    preds = head.predict([PAGE] * 4, ACTS)
    assert [p.next_obs.tree for p in preds] == NXTS and all(p.ok for p in preds)
    greedy = WorldModelRunner(model, tok, DreamConfig(max_change_tokens=8, wm_decode="greedy"))
    assert [p.next_obs.tree for p in greedy.predict([PAGE] * 4, ACTS)] != NXTS
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    m2, t2 = load_model(WorldModel, str(tmp_path))
    assert m2.state.change_head_trained
    assert torch.equal(m2.change_head.weight, model.change_head.weight)
    again = WorldModelRunner(m2, t2, DreamConfig(max_change_tokens=8, wm_decode="head"))
    assert [p.next_obs.tree for p in again.predict([PAGE] * 4, ACTS)] == NXTS


def test_the_head_decodes_no_text_for_rows_a_proposal_gives(monkeypatch):
    """The heads' input of the forward-only pass is the one the generating prefill reads, and
    ``decode="head"`` generates text only for the rows whose pick is ``other``."""
    model, tok, _ = _trained_on_four_edits()
    run = WorldModelRunner(model, tok, DreamConfig(max_change_tokens=8, wm_decode="head"))
    prompts = [run.prompt_ids(PAGE, a) for a in ACTS]
    _, ref = run.generate_texts(prompts, return_hidden=True)
    assert torch.allclose(run.prefill_head_input(prompts, chunk=3), ref, atol=1e-5)
    calls: list[int] = []
    real = WorldModelRunner.generate_texts

    def counting(self, ps, **kw):
        calls.append(len(ps))
        return real(self, ps, **kw)

    monkeypatch.setattr(WorldModelRunner, "generate_texts", counting)
    preds = run.predict([PAGE] * 4, ACTS)
    assert [p.next_obs.tree for p in preds] == NXTS and calls == []  # every row picked
    want = [p.p_success for p in preds]
    assert want == pytest.approx(torch.softmax(model.reward_head(ref), -1)[:, 1].tolist(), abs=1e-5)
    with torch.no_grad():  # make the head answer "other" for every row: the text decides
        model.change_head.bias[OTHER] = 1e4
    texts = [p.text for p in run.predict([PAGE] * 4, ACTS)]
    assert calls == [4] and texts == real(run, prompts)


def test_an_untrained_change_head_leaves_the_text_in_charge():
    model, tok = make_model(
        WorldModel, ModelConfig(layers=1, d_model=64, heads=2, max_positions=320)
    )
    assert not getattr(model.config, "wm_change_head_trained", False)
    a = WorldModelRunner(model, tok, DreamConfig(max_change_tokens=8, wm_decode="head"))
    b = WorldModelRunner(model, tok, DreamConfig(max_change_tokens=8, wm_decode="greedy"))
    acts = ["click(1)"]
    assert a.predict([PAGE], acts)[0].text == b.predict([PAGE], acts)[0].text


def test_head_targets_reward_done_class_balanced_change_uniform():
    """The reward and done heads' rows are class-balanced (each class weighs 1/2); the change
    head's rows weigh the same (plain cross-entropy)."""
    from models.world_model.loss import _wm_head_targets

    model, _tok = make_model(
        WorldModel, ModelConfig(layers=1, d_model=64, heads=2, max_positions=320)
    )
    ts = [_tr("click(1)", TICKED, i) for i in range(6)]
    ts[0] = dataclasses.replace(ts[0], reward=1.0, done=True)
    ts[1] = dataclasses.replace(ts[1], reward=-1.0, done=True)
    tg = _wm_head_targets(ts, torch.device("cpu"), model)
    y, w = tg["reward_head"]
    assert y.tolist() == [1, 0, 0, 0, 0, 0]
    assert torch.allclose(w, torch.tensor([1 / 2] + [1 / 10] * 5))
    dy, dw = tg["done_head"]
    assert dy.tolist() == [1, 1, 0, 0, 0, 0] and torch.allclose(dw[:2], torch.tensor([0.25, 0.25]))
    cy, cw = tg["change_head"]
    assert cy.tolist() == [KINDS.index("checked")] * 6 and torch.allclose(
        cw, torch.full((6,), 1 / 6)
    )
