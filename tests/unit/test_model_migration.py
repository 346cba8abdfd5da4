"""The models as explicit modules: every part declared in the constructor (parameter order fixed
by it), the spec saved beside the weights, one call to save and one to load, and directories in
the legacy layout (parts inside ``model.safetensors``, flags in ``config.json``) loaded through
``models.lm.saved.migrate_legacy`` with the same weights and the same outputs."""

from __future__ import annotations

import dataclasses
import json
import logging

import pytest
import torch

from core.config.model import ModelConfig
from core.spaces import Observation
from models.lm.prompts import world_model_prompt_ids
from models.lm.saved import META, PARTS, load_model, make_model
from models.policy.model import Policy, PolicySpec
from models.world_model.model import WorldModel, WorldModelSpec
from tests.factories import save_legacy

CFG = ModelConfig(layers=1, d_model=32, heads=2, max_positions=320, policy_match_feature=True)
PAGE = Observation(
    instruction='Click on the link "Alpha".',
    url="/x",
    tree='[1] link "Beta"\n[2] link "Alpha"\n[3] button "Submit"',
    next_id=4,
)


def _scramble(model: torch.nn.Module, seed: int = 5) -> None:
    """Trained-looking weights in every part beside the backbone (zero-initialised parts would
    hide a part that is not restored)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if not name.startswith("lm."):
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)


def _logits(model, tok) -> torch.Tensor:
    ids = torch.tensor([world_model_prompt_ids(tok, PAGE, "click(2)", 320, 32)])
    with torch.no_grad():
        return model(input_ids=ids).logits


def test_parts_are_declared_in_the_constructor_in_optimizer_order():
    pol, _ = make_model(Policy, CFG)
    assert isinstance(pol, Policy) and pol.spec == PolicySpec(match_feature=True, element_head=True)
    names = [n for n, _ in pol.named_parameters()]
    assert names[-3:] == ["match.weight", "element_head.named", "element_head.proj.weight"]
    assert all(n.startswith("lm.") for n in names[:-3])
    wm, _ = make_model(WorldModel, CFG)
    assert isinstance(wm, WorldModel) and wm.spec == WorldModelSpec(ensemble=4)
    order = [n.split(".")[0] for n, _ in wm.named_parameters()]
    firsts = list(dict.fromkeys(order))
    assert firsts == [
        "lm",
        "match",
        "page_head",
        "reward_head",
        "done_head",
        "change_head",
        "lines",
        "ensemble",
    ]
    plain, _ = make_model(WorldModel, CFG, WorldModelSpec(match_feature=False, head_lines=False))
    assert plain.match is None and plain.lines is None
    assert "lines" not in {n.split(".")[0] for n, _ in plain.named_parameters()}


def test_save_and_load_in_one_call_keep_spec_state_and_weights(tmp_path):
    wm, tok = make_model(WorldModel, CFG, WorldModelSpec(head_acted=False))
    _scramble(wm)
    wm.mark_heads_trained()
    wm.save_pretrained(str(tmp_path))
    tok.save_pretrained(str(tmp_path))
    meta = json.loads((tmp_path / META).read_text())
    assert meta["kind"] == "world_model" and meta["spec"]["head_acted"] is False
    assert meta["state"]["heads_trained"] is True and (tmp_path / PARTS).exists()
    again, _ = load_model(WorldModel, str(tmp_path))
    assert again.spec == wm.spec and again.heads_trained() and not again.change_head_trained()
    for (n, a), (m, b) in zip(again.state_dict().items(), wm.state_dict().items(), strict=True):
        assert n == m and torch.equal(a, b), n
    assert torch.equal(_logits(again, tok), _logits(wm, tok))
    # the backbone alone is a plain Hugging Face directory
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(str(tmp_path), local_files_only=True)
    assert sum(p.numel() for p in hf.parameters()) == sum(p.numel() for p in wm.lm.parameters())


def test_a_directory_of_another_kind_is_refused(tmp_path):
    pol, tok = make_model(Policy, CFG)
    pol.save_pretrained(str(tmp_path))
    tok.save_pretrained(str(tmp_path))
    with pytest.raises(ValueError, match="policy"):
        load_model(WorldModel, str(tmp_path))


def test_missing_part_weights_are_refused(tmp_path):
    from safetensors.torch import load_file, save_file

    pol, tok = make_model(Policy, CFG)
    pol.save_pretrained(str(tmp_path))
    tok.save_pretrained(str(tmp_path))
    kept = {k: v for k, v in load_file(str(tmp_path / PARTS)).items() if "element_head" not in k}
    save_file(kept, str(tmp_path / PARTS))
    with pytest.raises(ValueError, match="element_head"):
        load_model(Policy, str(tmp_path))


@pytest.mark.parametrize("kind", ["policy", "world_model"])
def test_legacy_directories_load_through_the_migration(kind, tmp_path):
    """A directory saved by the builds that attached parts to the Hugging Face model loads as the
    same model: same spec, same state, same weights, same outputs, and no load report."""
    records: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda r: records.append(r.getMessage())  # type: ignore[method-assign]
    hf = logging.getLogger("transformers")
    hf.addHandler(handler)
    try:
        if kind == "policy":
            model, tok = make_model(Policy, CFG)
            cls = Policy
        else:
            # the legacy layout predates the ensemble
            model, tok = make_model(WorldModel, dataclasses.replace(CFG, world_model_ensemble=0))
            model.mark_heads_trained()
            model.state.change_head_trained = True
            cls = WorldModel
        _scramble(model)
        save_legacy(model, tok, str(tmp_path))
        assert not (tmp_path / META).exists()
        again, _ = load_model(cls, str(tmp_path))
    finally:
        hf.removeHandler(handler)
    assert not [m for m in records if "LOAD REPORT" in m], records
    assert again.spec == model.spec
    if kind == "world_model":
        assert again.state == model.state
    for (n, a), (m, b) in zip(again.state_dict().items(), model.state_dict().items(), strict=True):
        assert n == m and torch.equal(a, b), n
    assert torch.equal(_logits(again, tok), _logits(model, tok))


def test_a_legacy_world_model_without_the_change_head_starts_it_fresh(tmp_path):
    wm, tok = make_model(WorldModel, CFG)
    wm.mark_heads_trained()
    wm.state.change_head_trained = True
    _scramble(wm)
    save_legacy(wm, tok, str(tmp_path), drop=("change_head",))
    again, _ = load_model(WorldModel, str(tmp_path))
    fresh, _ = make_model(WorldModel, CFG)
    assert again.heads_trained() and not again.change_head_trained()
    assert torch.equal(again.change_head.weight, fresh.change_head.weight)
    assert not torch.equal(again.reward_head.weight, fresh.reward_head.weight)  # restored


def test_match_flags_are_a_forward_argument():
    """The feature is added by the forward, from the rows' own tokens or from the flags given:
    the same flags given explicitly give the same logits; none given on a one-token step."""
    wm, tok = make_model(WorldModel, CFG)
    _scramble(wm)
    ids = torch.tensor([world_model_prompt_ids(tok, PAGE, "click(2)", 320, 32)])
    flags = torch.tensor(wm.prompt_flags(ids.tolist()))
    assert bool(flags.any())
    with torch.no_grad():
        own = wm(input_ids=ids).logits
        given = wm(input_ids=ids, match_flags=flags).logits
        none = wm(input_ids=ids, match_flags=torch.zeros_like(flags)).logits
        plain = wm.lm(input_ids=ids).logits
    assert torch.equal(own, given)
    assert torch.equal(none, plain) and not torch.allclose(own, plain)
    with pytest.raises(ValueError, match="match flags"):
        wm(input_ids=ids, match_flags=flags[:, 1:])
