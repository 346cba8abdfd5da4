"""The world model's reward and done heads: learning, prediction, save/load, the text fallback,
and the ``dream.wm_decode`` field."""

import json

import pytest
import torch

from core.config import Config, DreamConfig, TrainerConfig, describe, load_config
from core.spaces import Observation
from models.lm.saved import load_model, make_model
from models.world_model.loss import world_model_batch_loss
from models.world_model.model import HEADS, WorldModel
from models.world_model.runner import WorldModelRunner
from models.world_model.scores import fidelity
from tests.factories import WM_CFG as CFG  # the world model's small model
from tests.factories import save_legacy, wm_transition

# one page, two actions: clicking [1] succeeds, clicking [2] fails (MiniWoB raw reward -1, done)
P = Observation(
    "Click Yes.", "u", '[1] button "Yes"\n[2] button "No"', next_id=3, element_ids=[1, 2]
)
YES = Observation(P.instruction, "u", '[3] heading "Done"', next_id=4, element_ids=[3])
NO = Observation(P.instruction, "u", '[3] heading "Wrong"', next_id=4, element_ids=[3])
Q = Observation(
    "Type hi.", "u", '[1] textbox "Name"\n[2] button "Go"', next_id=3, element_ids=[1, 2]
)
BATCH = [
    wm_transition(P, "click(1)", YES, 1.0, True, 0),
    wm_transition(P, "click(2)", NO, -1.0, True, 1),
    wm_transition(Q, "click(1)", Q, 0.0, False, 2),
    wm_transition(Q, "click(2)", Q, 0.0, False, 3),
]


@pytest.fixture(scope="module")
def trained():
    """A small world model trained with the trainer's loss until both heads fit the batch."""
    torch.manual_seed(0)
    model, tok = make_model(WorldModel, CFG)
    assert not model.heads_trained() and all(getattr(model, h) is not None for h in HEADS)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    tc = TrainerConfig(infonce_weight=0.0)
    for _ in range(300):
        opt.zero_grad()
        loss, m = world_model_batch_loss(model, tok, BATCH, tc)
        loss.backward()
        opt.step()
        model.mark_heads_trained(change_head=True)  # as the trainer does after a step
        if m["reward_head_loss"] < 0.1 and m["done_head_loss"] < 0.1:
            break
    assert m["reward_head_acc"] == 1.0 and m["done_head_acc"] == 1.0, m
    assert m["reward_positive_share"] == 0.25 and m["done_positive_share"] == 0.5
    assert model.heads_trained()  # set by the training step
    model.eval()
    return model, tok


def test_heads_give_different_rewards_to_actions_on_the_same_page(trained):
    model, tok = trained
    r = WorldModelRunner(
        model, tok, DreamConfig(max_change_tokens=24)
    )  # too short for the text's reward line
    preds = r.predict([P, P, Q], ["click(1)", "click(2)", "click(1)"])
    assert [p.reward for p in preds] == [1.0, 0.0, 0.0]
    assert [p.done for p in preds] == [True, True, False]
    assert preds[0].p_success > 0.5 > preds[1].p_success and preds[2].p_done < 0.5
    f = fidelity(preds, [YES, NO, Q], [1.0, -1.0, 0.0], [True, True, False])  # measures the heads
    assert f["reward_bal_acc"] == 1.0 and f["done_bal_acc"] == 1.0
    # sampled decoding and duplicated rows (the greedy path generates them once) give the same heads
    again = r.predict([P, P, P], ["click(2)", "click(1)", "click(2)"], sample=True)
    assert [p.reward for p in again] == [0.0, 1.0, 0.0]
    assert abs(again[1].p_success - preds[0].p_success) < 1e-4


def test_heads_survive_save_and_load(trained, tmp_path):
    model, tok = trained
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "dynaweb.json").read_text())["state"]["heads_trained"] is True
    m2, t2 = load_model(WorldModel, str(tmp_path))
    assert m2.heads_trained()
    for h in ("page_head", *HEADS):
        assert torch.equal(getattr(m2, h).weight, getattr(model, h).weight), h
    preds = WorldModelRunner(m2, t2, DreamConfig(max_change_tokens=24)).predict(
        [P, P], ["click(1)", "click(2)"]
    )
    assert [p.reward for p in preds] == [1.0, 0.0]


def test_eval_world_model_cli_measures_the_heads(trained, tmp_path, capsys):
    """``dynaweb eval world-model --checkpoint DIR`` loads the heads; its reward/done figures are theirs."""
    from dataclasses import asdict

    from infra.cli import main

    model, tok = trained
    model.save_pretrained(tmp_path / "wm")
    tok.save_pretrained(tmp_path / "wm")
    data = tmp_path / "eval.jsonl"
    data.write_text("".join(json.dumps(asdict(t)) + "\n" for t in BATCH))
    argv = [
        "eval",
        "world-model",
        "--json",
        "--checkpoint",
        str(tmp_path / "wm"),
        "--data",
        str(data),
        "--split",
        "all",
        "--home",
        str(tmp_path),
        "--set",
        "dream.max_change_tokens=8",
    ]
    assert main(argv) == 0
    res = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert res["reward_source"] == "heads" and res["decode"] == "head" and res["n"] == 4
    assert res["stage1"]["n"] == 4 and res["stage1"]["targets"]["apply_rate"]["met"] is not None
    assert (
        res["reward_bal_acc"] == 1.0 and res["done_bal_acc"] == 1.0
    )  # 8 tokens: no reward line in the text


def test_a_file_without_heads_loads_and_falls_back_to_the_text(trained, tmp_path):
    model, tok = trained
    # as saved before the heads existed: the legacy layout without them
    save_legacy(model, tok, tmp_path, drop=("reward_head", "done_head"))
    m2, t2 = load_model(WorldModel, str(tmp_path))
    assert not m2.heads_trained() and m2.reward_head is not None  # fresh heads, flag off
    assert torch.equal(m2.page_head.weight, model.page_head.weight)
    preds = WorldModelRunner(m2, t2, DreamConfig(max_change_tokens=24)).predict(
        [P, Q], ["click(1)", "click(1)"]
    )
    for p in preds:
        assert p.p_success is None and p.p_done is None
        assert (
            p.reward == p.text_reward and p.done == p.text_done
        )  # the text's lines (0 / not done if rejected)
        if not p.ok:
            assert p.reward == 0.0 and not p.done


def test_untrained_model_uses_the_text_and_head_weight_zero_leaves_heads_untrained():
    model, tok = make_model(WorldModel, CFG)
    p = WorldModelRunner(model, tok, DreamConfig(max_change_tokens=8)).predict([P], ["click(1)"])[0]
    assert p.p_success is None and p.reward == p.text_reward
    loss, m = world_model_batch_loss(
        model, tok, BATCH, TrainerConfig(infonce_weight=0.0, wm_head_weight=0.0)
    )
    assert "reward_head_loss" not in m and not model.heads_trained()
    with torch.no_grad():  # an evaluation pass does not mark the heads trained either
        _, m = world_model_batch_loss(model, tok, BATCH, TrainerConfig(infonce_weight=0.0))
    assert "reward_head_acc" in m and not model.heads_trained()


def test_wm_decode_is_a_config_field_read_by_the_runner():
    model, tok = make_model(WorldModel, CFG)
    assert DreamConfig().wm_decode == "head"
    assert WorldModelRunner(model, tok, DreamConfig()).decode == "head"
    assert WorldModelRunner(model, tok, DreamConfig(wm_decode="rerank")).decode == "rerank"
    cfg = load_config(overrides={"dream.wm_decode": "rerank"}, env={})
    # the gate and eval: the dream section and the run's positions
    assert WorldModelRunner(model, tok, cfg.dream, cfg.model.max_positions).decode == "rerank"
    assert (
        WorldModelRunner(model, tok, cfg.dream).decode == "rerank"
    )  # its dream section (dreams, trainer)
    assert WorldModelRunner(model, tok, None).decode == "head"
    with pytest.raises(ValueError, match="wm_decode"):
        WorldModelRunner(model, tok, DreamConfig(wm_decode="beam"))  # type: ignore[arg-type]
    assert any(k == "dream.wm_decode" and h for k, _, h in describe(Config))  # documented


def test_heads_read_the_acted_element_line_and_the_action():
    """``head_positions``: the line of the element the action names and the ``Action:`` tail; the
    tail alone for an action without an element; the last token without an ``Action:`` marker."""
    from models.lm.prompts import world_model_prompt_ids
    from models.lm.tokenizer import decode, encode
    from models.world_model.heads import head_positions

    _, tok = make_model(WorldModel, CFG)
    page = Observation('Click on "No".', "u", '[1] list\n  [12] button "No"\n[2] text "[12] No"', next_id=13,
                       element_ids=[1, 12, 2])  # fmt: skip

    def read(action: str) -> str:
        ids = world_model_prompt_ids(tok, page, action, CFG.max_positions, 24)
        pos = head_positions(tok, ids)
        assert pos == sorted(set(pos)) and pos[-1] == len(ids) - 1
        return "|".join(decode(tok, [ids[q] for q in run]) for run in _runs(pos))

    line, tail = read("click(12)").split("|")
    assert line.strip() == '[12] button "No"' and tail.strip() == "Action: click(12)\nChange:"
    assert read('type(2, "x")').split("|")[0].strip() == '[2] text "[12] No"'
    assert (
        read('scroll("up")').strip() == 'Action: scroll("up")\nChange:'
    )  # no element: the tail only
    assert read("click(9)").strip() == "Action: click(9)\nChange:"  # not on the page: the tail only
    ids = encode(tok, "no marker here")
    assert head_positions(tok, ids) == [len(ids) - 1]


def _runs(pos: list[int]) -> list[list[int]]:
    out: list[list[int]] = []
    for q in pos:
        if out and q == out[-1][-1] + 1:
            out[-1].append(q)
        else:
            out.append([q])
    return out


def test_runner_heads_read_what_the_loss_trained_with_shared_prefixes(trained):
    """The runner's head input (prefix pass + tail pass, rows of a page sharing its prefix) is the
    learner's (one forward per row): same p(success)."""
    from models.world_model.loss import _wm_forward, _wm_rows

    model, tok = trained
    acts = ["click(1)", "click(2)", 'scroll("up")', "click(1)"]
    trs = [wm_transition(P, a, P, 0.0, False, k) for k, a in enumerate(acts)]
    r = WorldModelRunner(model, tok, DreamConfig(max_change_tokens=24))
    got = [p.p_success for p in r.predict([P] * 4, acts, sample=True)]  # no dedupe: every row runs
    rows, _, _ = _wm_rows(tok, trs, CFG.max_positions, 24)
    with torch.no_grad():
        was = model.training
        model.eval()
        want = [float(model.head_probs(_wm_forward(model, tok, [row], hidden=False, heads=True)[3].head_input)[0][0])
                for row in rows]  # fmt: skip
        model.train(was)
    assert max(abs(a - b) for a, b in zip(got, want, strict=True)) < 1e-4, (got, want)


def test_heads_trained_on_another_input_count_as_untrained(trained, tmp_path):
    """A model whose heads were trained before they read ``HEAD_FEATURE`` (the last prompt token)
    loads with the flag off: reward and done come from the text until a step retrains the heads."""
    from models.world_model.model import HEAD_FEATURE

    model, tok = trained
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    meta = json.loads((tmp_path / "dynaweb.json").read_text())
    assert meta["state"]["head_feature"] == HEAD_FEATURE
    meta["state"]["head_feature"] = None
    (tmp_path / "dynaweb.json").write_text(json.dumps(meta))
    m2, t2 = load_model(WorldModel, str(tmp_path))
    assert not m2.heads_trained()
    world_model_batch_loss(m2, t2, BATCH, TrainerConfig(infonce_weight=0.0))[0].backward()
    m2.mark_heads_trained(change_head=True)  # as the trainer does after a step
    assert m2.heads_trained()


def test_the_loss_marks_nothing_the_trainer_marks_the_heads_after_its_step():
    """A training pass of the loss leaves the model's flags alone; ``mark_heads_trained`` (the
    learner's, after its step) sets them."""
    model, tok = make_model(WorldModel, CFG)
    loss, _ = world_model_batch_loss(model, tok, BATCH, TrainerConfig(infonce_weight=0.0))
    loss.backward()
    assert not model.heads_trained() and not model.change_head_trained()
    model.mark_heads_trained(change_head=True)
    assert model.heads_trained() and model.change_head_trained()
