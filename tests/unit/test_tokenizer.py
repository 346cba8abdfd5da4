"""The shipped BPE tokenizer (``model.tokenizer = "bpe"``) next to the byte tokenizer: exact round
trips of every action kind and of change scripts, special ids, special-token strings in page
text, compositional digits, fewer tokens per transition, save/load (plain and through a
model checkpoint), and that the shipped files are what ``dynaweb tokenizer train`` makes of
the committed corpus."""

from __future__ import annotations

import json

import pytest

from core.config import ModelConfig
from core.spaces import Action, Observation, parse_action
from models import tokenizer_train as tt
from models.lm.prompts import action_ids, policy_prompt_ids, world_model_prompt_ids
from models.lm.saved import load_model, make_model
from models.lm.tokenizer import (
    BPE_DIR,
    build_tokenizer,
    count_tokens,
    decode,
    encode,
    load_tokenizer,
)
from models.world_model.change import diff_to_change, format_output, parse_model_output

TEXTS = [
    "hello world",
    "",
    " ",
    "  two  spaces  ",
    "ünïcödé 漢字 😀",
    'quote " and \\ back\\slash',
    "a\nb\tc\r\n",
    "</s>",
    "x<pad>y<unk>z",
    "1234567890",
    "Kiera",
    "O'Brien & co. <b>bold</b>",
]
ACTIONS = (
    [
        Action.click(1),
        Action.click(12),
        Action.click(1024),
        Action.press("Enter"),
        Action.press("ArrowDown"),
        Action.scroll("up"),
        Action.scroll("down"),
        Action.go_back(),
        Action.stop(),
        Action.stop("42"),
        Action.stop("the answer </s> is\nhere"),
    ]
    + [Action.type(5, t) for t in TEXTS]
    + [Action.select(7, t) for t in TEXTS]
)
TREE = (
    '[1] heading "Form"\n[2] textbox "Name" value="bob"\n[3] combobox "Color"\n  option "Red" selected\n'
    '  option "Blue"\n[4] checkbox "Agree"\n[5] button "Submit" clickable\ntext "</s> shown on the page"'
)
NEXT = [
    TREE,
    TREE.replace('value="bob"', 'value="Kiera"'),
    TREE.replace('"Red" selected', '"Red"').replace('"Blue"', '"Blue" selected'),
    TREE.replace('"Agree"', '"Agree" checked') + '\n[6] text "Thanks!"',
    '[7] heading "Done"\nreward 1\n\\escaped',
    "",
]


@pytest.fixture(scope="module")
def bpe():
    return build_tokenizer("bpe")


@pytest.fixture(scope="module", params=["bpe", "byte"])
def tok(request):
    return build_tokenizer(request.param)


def test_shipped_bpe_ids(bpe) -> None:
    assert (bpe.pad_token_id, bpe.eos_token_id, bpe.unk_token_id) == (0, 1, 2)
    assert len(bpe) == tt.VOCAB_SIZE and bpe.is_fast
    assert bpe("ab").input_ids[-1] == 1  # eos appended by a plain call, like ByT5
    assert (BPE_DIR / "tokenizer.json").exists() and (BPE_DIR / "tokenizer_config.json").exists()
    with pytest.raises(ValueError, match="model.tokenizer"):
        build_tokenizer("wordpiece")


def test_round_trip_every_action_kind(tok) -> None:
    kinds = set()
    for a in ACTIONS:
        text = a.to_text()
        ids = encode(tok, text)
        assert decode(tok, ids) == text
        assert decode(tok, action_ids(tok, text)) == text  # + eos, skipped
        assert parse_action(decode(tok, ids)) == a
        assert not {tok.eos_token_id, tok.pad_token_id} & set(ids)
        kinds.add(a.kind)
    assert kinds == {"click", "type", "select", "press", "scroll", "go_back", "stop"}
    for t in TEXTS:
        assert decode(tok, encode(tok, t)) == t


def test_round_trip_change_scripts(tok) -> None:
    for nxt in NEXT:
        for reward, done in ((0.0, False), (1.0, True), (-1.0, True), (0.5, False)):
            out = format_output(diff_to_change(TREE, nxt, next_id=6), reward, done)
            back = decode(tok, encode(tok, out) + [tok.eos_token_id])
            assert back == out
            assert parse_model_output(back, TREE, 6) == parse_model_output(out, TREE, 6)
            assert parse_model_output(back, TREE, 6)[3]  # parses


def test_special_token_strings_in_text_stay_text(tok) -> None:
    page = 'text "</s> <pad> <unk> <extra_id_0>"'
    ids = encode(tok, page)
    assert not {0, 1, 2} & set(ids)
    assert decode(tok, ids) == page
    if tok.is_fast:  # the tokenizer called directly agrees (split_special_tokens is saved with it)
        assert tok(page, add_special_tokens=False).input_ids == ids
        assert encode(tok, page) == ids  # a direct call does not switch it off for encode
    obs = Observation("Click </s>.", "u", page)
    prompt = policy_prompt_ids(tok, obs, [], 512)
    assert decode(tok, prompt).startswith("Task: Click </s>.\nPage:\n" + page)
    assert tok.eos_token_id not in prompt


def test_digits_are_compositional(bpe) -> None:
    one, twelve = encode(bpe, "click(1)"), encode(bpe, "click(12)")
    assert twelve[: len(one) - 1] == one[:-1]  # click(1 is a token prefix of click(12
    for d in "0123456789":
        (i,) = encode(bpe, d)
        assert decode(bpe, [i]) == d
    assert len(encode(bpe, "[1234]")) >= 6  # every digit its own token
    assert encode(bpe, "12") == encode(bpe, "1") + encode(bpe, "2")


def test_encode_matches_the_tokenizer_call_and_count(tok) -> None:
    for t in TEXTS[:7] + (
        [TREE] if tok.is_fast else []
    ):  # a direct ByT5 call maps "</s>" in TREE to eos
        assert encode(tok, t) == list(tok(t, add_special_tokens=False).input_ids)
    assert count_tokens(tok, TEXTS) == [len(encode(tok, t)) for t in TEXTS]


def test_prompt_fitting_with_either_tokenizer(tok) -> None:
    big = Observation(
        "Click " + "x" * 500, "u", "\n".join(f'[{i}] button "B{i}"' for i in range(300))
    )
    for mp in (128, 512, 1024):
        ids = policy_prompt_ids(tok, big, [f"click({i})" for i in range(10)], mp)
        assert len(ids) <= max(16, mp - 96)
        assert decode(tok, ids).endswith(
            "click(9)\nAction: " if mp >= 512 else "\nAction: "
        )  # the tail survives
        w = world_model_prompt_ids(tok, big, "click(3)", mp, 64)
        assert len(w) <= max(16, mp - 64) and decode(tok, w).endswith("Action: click(3)\nChange:\n")
    small = Observation("Click.", "u", TREE, focused=2)
    assert (
        decode(tok, policy_prompt_ids(tok, small, [], 1024))
        == small.render() + "\nHistory: none\nAction: "
    )


def test_fewer_tokens_per_transition_than_bytes(bpe) -> None:
    rows = tt.read_corpus()
    _, held = tt.split_corpus(rows)
    texts = tt.transition_texts(held[::4])  # a sample of the held-out episodes
    b = tt.tokens_per_transition(build_tokenizer("byte"), texts)
    p = tt.tokens_per_transition(bpe, texts)
    ratio = b["total"] / p["total"]
    assert ratio > 2.8, (
        b,
        p,
    )  # measured 3.3x on all held-out episodes (docs/results/tokenizer/README.md)
    assert b["policy"] / p["policy"] > 2.5 and b["world_model"] / p["world_model"] > 2.5


def test_save_load_round_trip(tok, tmp_path) -> None:
    tok.save_pretrained(str(tmp_path))
    back = load_tokenizer(str(tmp_path))
    assert (back.pad_token_id, back.eos_token_id, len(back)) == (
        tok.pad_token_id,
        tok.eos_token_id,
        len(tok),
    )
    for t in TEXTS + [a.to_text() for a in ACTIONS] + [TREE]:
        assert encode(back, t) == encode(tok, t)
        assert decode(back, encode(back, t)) == t
    if tok.is_fast:
        cfg = json.loads((tmp_path / "tokenizer_config.json").read_text())
        assert cfg["split_special_tokens"] is True and cfg["clean_up_tokenization_spaces"] is False


@pytest.mark.parametrize("kind", ["bpe", "byte"])
def test_checkpoint_round_trip(kind: str, tmp_path) -> None:
    """What the trainer's checkpoint writes (model + tokenizer ``save_pretrained``) loads back with
    ``load_model`` (the dream generator's ``ModelSlot``, eval, gate)."""
    import torch

    from models.policy.model import Policy
    from models.world_model.model import WorldModel

    mc = ModelConfig(layers=1, d_model=32, heads=2, max_positions=512, tokenizer=kind)
    for cls in (Policy, WorldModel):
        model, tok = make_model(cls, mc)
        assert (
            model.lm.get_input_embeddings().weight.shape[0]
            == len(tok)
            == (tt.VOCAB_SIZE if kind == "bpe" else 384)
        )
        d = tmp_path / cls.KIND
        model.save_pretrained(str(d))
        tok.save_pretrained(str(d))
        model2, tok2 = load_model(cls, str(d))
        assert type(tok2).__name__ == type(tok).__name__
        ids = encode(tok, TREE) + encode(tok, 'type(2, "Kiera")') + [tok.eos_token_id]
        assert encode(tok2, TREE) + encode(tok2, 'type(2, "Kiera")') + [tok2.eos_token_id] == ids
        with torch.no_grad():
            a = model(input_ids=torch.tensor([ids])).logits
            b = model2(input_ids=torch.tensor([ids])).logits
        assert torch.allclose(a, b, atol=1e-5)


def test_shipped_tokenizer_is_the_trained_one(tmp_path) -> None:
    """``dynaweb tokenizer train --out DIR`` on the committed corpus rebuilds the shipped files exactly
    (training is deterministic)."""
    res = tt.train(tmp_path)
    assert res["vocab_size"] == tt.VOCAB_SIZE
    for name in ("tokenizer.json", "tokenizer_config.json"):
        assert json.loads((tmp_path / name).read_text()) == json.loads(
            (BPE_DIR / name).read_text()
        ), name
