"""The heads' line counts (``WorldModelSpec.head_counts``, ``models.world_model.lines``): the page lines,
named or not, each line's mean summed, saved and restored, and a model saved before them; and the
acted line's maximum (``WorldModelSpec.head_acted``)."""

from __future__ import annotations

import torch

from core.config import ModelConfig
from core.spaces import Observation
from models.lm.match import page_line_positions, page_lines, token_pieces
from models.lm.prompts import world_model_prompt_ids
from models.lm.saved import load_model, make_model
from models.lm.tokenizer import decode
from models.world_model.lines import COUNT_SCALE, MatchLines, RowLines, line_positions
from models.world_model.model import WorldModel, WorldModelSpec

BOXES = Observation(
    "Select zUGdbj, Dej2xU and click Submit.",
    "u",
    '[1] checkbox "szBL5fh" checked\n[2] checkbox "u6RK"\n[3] checkbox "zUGdbj" checked\n'
    '[4] checkbox "Dej2xU"\n[5] button "Submit"',
    next_id=6,
    element_ids=[1, 2, 3, 4, 5],
)


def _cfg(**kw) -> ModelConfig:
    return ModelConfig(layers=1, d_model=32, heads=2, max_positions=320, **kw)


def _saved_and_loaded(model, tok, path):
    """``model`` after ``save_pretrained`` to ``path`` and ``load_model`` from it."""
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return load_model(WorldModel, str(path))[0]


def test_every_page_line_with_whether_the_instruction_names_it():
    _, tok = make_model(WorldModel, _cfg())
    ids = world_model_prompt_ids(tok, BOXES, "click(5)", 320, 32)
    got = [
        (n, decode(tok, [ids[i] for i in q]).strip())
        for n, q in page_line_positions(ids, token_pieces(tok))
    ]
    assert got == [
        (False, "Page:"),  # the prompt's own lines count among the others
        (False, '[1] checkbox "szBL5fh" checked'),
        (False, '[2] checkbox "u6RK"'),
        (True, '[3] checkbox "zUGdbj" checked'),
        (True, '[4] checkbox "Dej2xU"'),
        (True, '[5] button "Submit"'),
    ]
    assert page_line_positions([1, 2, 3], token_pieces(tok)) == []  # not a prompt


def test_the_sums_count_lines_where_the_mean_only_shares():
    """Two pages whose named lines look alike but number 1 and 3: the mean is the same, the
    named sum is three times larger; the other lines go to their own sum."""
    d = 4
    ml = MatchLines(d, [], counts=True)
    with torch.no_grad():
        ml.named_count.weight.copy_(torch.eye(d))
        ml.other_count.weight.copy_(2 * torch.eye(d))
    v = torch.tensor([1.0, 0.0, 0.0, 0.0])
    w = torch.tensor([0.0, 1.0, 0.0, 0.0])
    hidden = torch.stack([v, v, w, v, v, v]).unsqueeze(0).repeat(2, 1, 1)  # (2, 6, d)
    rows = [
        RowLines([0, 1], [(True, [0, 1]), (False, [2])]),  # one named line (2 tokens), one other
        RowLines([0, 1, 3, 4, 5], [(True, [0, 1]), (True, [3, 4]), (True, [5]), (False, [2])]),
    ]
    out = ml(lambda b, q: hidden[b, q], rows, hidden[:, 0])
    assert torch.allclose(out[0], (v + 2 * w) / COUNT_SCALE)
    assert torch.allclose(out[1], (3 * v + 2 * w) / COUNT_SCALE)
    without = MatchLines(d, [], counts=False)
    same = without(lambda b, q: hidden[b, q], rows, hidden[:, 0])
    assert torch.equal(same[0], same[1])  # the mean of the named lines cannot tell them apart


def test_a_line_counts_by_its_strongest_token_not_its_length():
    """A line is the element-wise max over its tokens: a marked token counts the same in a line
    of 2 tokens as in a line of 5 (a mean would carry it at 1/2 and 1/5)."""
    d = 3
    ml = MatchLines(d, [], counts=True)
    with torch.no_grad():
        ml.named_count.weight.copy_(torch.eye(d))
    mark, word = torch.tensor([0.0, 0.0, 1.0]), torch.tensor([0.5, 0.0, 0.0])
    short = torch.stack([word, mark])
    long = torch.stack([word, word, word, word, mark])
    hidden = [short, long]
    rows = [
        RowLines([0, 1], [(True, [0, 1])]),
        RowLines([0, 1, 2, 3, 4], [(True, [0, 1, 2, 3, 4])]),
    ]
    out = ml(lambda b, q: hidden[b][q], rows, torch.zeros(2, d))
    assert torch.allclose(out[0], out[1])
    assert torch.allclose(out[0], torch.tensor([0.5, 0.0, 1.0]) / COUNT_SCALE)


def test_counts_are_built_saved_restored_and_absent_from_a_model_saved_without(tmp_path):
    model, tok = make_model(WorldModel, _cfg())
    assert model.lines.counts and model.spec.head_counts
    with torch.no_grad():
        model.lines.other_count.weight.normal_()
    again = _saved_and_loaded(model, tok, tmp_path / "with")
    assert torch.equal(again.lines.other_count.weight, model.lines.other_count.weight)
    ids = world_model_prompt_ids(tok, BOXES, "click(5)", 320, 32)
    assert line_positions(again.lines, [ids])[0].page is not None
    old, otok = make_model(WorldModel, _cfg(), WorldModelSpec(head_counts=False))
    loaded = _saved_and_loaded(old, otok, tmp_path / "old")
    assert loaded.lines is not None and not loaded.lines.counts
    assert not hasattr(loaded.lines, "other_count") and not loaded.spec.head_counts
    assert line_positions(loaded.lines, [ids])[0].page is None
    assert [n for n, _ in loaded.named_parameters()] == [n for n, _ in old.named_parameters()]


def test_the_acted_line_is_the_page_line_of_the_element_the_action_names():
    _, tok = make_model(WorldModel, _cfg())
    pieces = token_pieces(tok)

    def acted(action: str) -> str | None:
        ids = world_model_prompt_ids(tok, BOXES, action, 320, 32)
        page, k = page_lines(ids, pieces)
        assert page == page_line_positions(ids, pieces)
        return decode(tok, [ids[i] for i in page[k][1]]).strip() if k >= 0 else None

    assert acted("click(5)") == '[5] button "Submit"'
    assert acted("click(2)") == '[2] checkbox "u6RK"'
    assert acted('type(4, "x")') == '[4] checkbox "Dej2xU"'
    assert acted("click(9)") is None  # not on the page
    assert acted("stop()") is None  # names no element
    assert page_lines([1, 2, 3], pieces) == ([], -1)  # not a prompt


def test_the_acted_line_is_read_by_its_strongest_token():
    """``acted_max`` reads the element-wise max over the acted line's tokens: the asked word's
    mark counts at full strength whatever the label's length; a row whose element the page does
    not show gets the bias."""
    d = 3
    ml = MatchLines(d, [], acted=True)
    with torch.no_grad():
        ml.acted_max.weight.copy_(torch.eye(d))
        ml.acted_max.bias.fill_(0.25)
    mark, word = torch.tensor([0.0, 0.0, 1.0]), torch.tensor([0.5, 0.0, 0.0])
    hidden = [torch.stack([word, mark]), torch.stack([word, word, word, word, mark]), word[None]]
    rows = [RowLines([], acted=[0, 1]), RowLines([], acted=[0, 1, 2, 3, 4]), RowLines([], acted=[])]
    out = ml(lambda b, q: hidden[b][q], rows, torch.zeros(3, d))
    assert torch.allclose(out[0], torch.tensor([0.75, 0.25, 1.25]))
    assert torch.allclose(out[1], out[0])
    assert torch.allclose(out[2], torch.full((d,), 0.25))
    assert not MatchLines(d, []).acted and not hasattr(MatchLines(d, []), "acted_max")


def test_the_acted_line_is_built_saved_restored_and_absent_from_a_model_saved_without(tmp_path):
    model, tok = make_model(WorldModel, _cfg())
    assert model.lines.acted and model.spec.head_acted
    with torch.no_grad():
        model.lines.acted_max.weight.normal_()
    again = _saved_and_loaded(model, tok, tmp_path / "with")
    assert torch.equal(again.lines.acted_max.weight, model.lines.acted_max.weight)
    ids = world_model_prompt_ids(tok, BOXES, "click(3)", 320, 32)
    got = line_positions(again.lines, [ids])[0].acted
    assert decode(tok, [ids[i] for i in got]).strip() == '[3] checkbox "zUGdbj" checked'
    old, otok = make_model(WorldModel, _cfg(), WorldModelSpec(head_acted=False))
    loaded = _saved_and_loaded(old, otok, tmp_path / "old")
    assert loaded.lines.counts and not loaded.lines.acted
    assert not loaded.spec.head_acted and line_positions(loaded.lines, [ids])[0].acted is None
    assert [n for n, _ in loaded.named_parameters()] == [n for n, _ in old.named_parameters()]
