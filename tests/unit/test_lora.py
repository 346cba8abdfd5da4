"""LoRA adapters on the policy's and the world model's backbone (``models.lm.lora``): only the
adapters and the model's own parts train; a checkpoint holds the adapters and parts, never the
base, and names the base by its sha256; a reader on another base refuses it; acting's log-probs
are the learner's; a reader's slot hot-reloads the adapters onto the base it already holds."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest
import torch

from core.config import Config, DreamConfig, ModelConfig
from core.spaces import Action
from models.checkpoints.reader import ModelSlot
from models.checkpoints.writer import save_engine_state
from models.lm.backbone import make_causal_lm
from models.lm.lean_decode import LeanStep
from models.lm.lora import ADAPTERS, BaseMismatch, base_digest
from models.lm.saved import load_model, make_model
from models.policy.model import Policy
from models.train.engine import make_engine
from models.world_model.decoding import generate_tokens
from models.world_model.model import WorldModel
from models.world_model.runner import WorldModelRunner
from tests.factories import WM_A, WM_A2, on_policy_loss

CFG = ModelConfig(layers=1, d_model=32, heads=2, max_positions=256)
IDS = torch.tensor([[5, 9, 14, 3, 77, 120, 8]])


def _base(path: Path, seed: int = 0) -> str:
    """A plain Hugging Face directory of a tiny GPT-Neo (a base model as a user brings one)."""
    lm, tok = make_causal_lm(dataclasses.replace(CFG, seed=seed))
    lm.save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> str:
    return _base(tmp_path_factory.mktemp("lora") / "base")


def _cfg(base: str, rank: int = 4) -> ModelConfig:
    return dataclasses.replace(
        CFG,
        policy_path=base,
        world_model_path=base,
        policy_lora_rank=rank,
        world_model_lora_rank=rank,
    )


def _nudge(model: torch.nn.Module, seed: int = 0) -> None:
    """Nonzero adapters (B starts at zero: a fresh adapter changes nothing) and parts."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.add_(torch.randn(p.shape, generator=g) * 0.2)


def _frozen(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters() if not p.requires_grad}


def _save(model, tok, path: Path) -> str:
    model.save_pretrained(str(path))
    tok.save_pretrained(str(path))
    return str(path)


def test_only_the_adapters_and_the_parts_train_and_a_step_moves_them_not_the_base(base):
    pol, tok = make_model(Policy, _cfg(base))
    wm, _ = make_model(WorldModel, _cfg(base))
    for model, parts in ((pol, ("element_head.",)), (wm, ("match.", "page_head.", "lines."))):
        trainable = [n for n, p in model.named_parameters() if p.requires_grad]
        assert any(".lora_A." in n for n in trainable) and any(".lora_B." in n for n in trainable)
        assert all(".lora_" in n or not n.startswith("lm.") for n in trainable), trainable
        assert all(any(n.startswith(p) for n, _ in model.named_parameters()) for p in parts)
        assert all(p.requires_grad for n, p in model.named_parameters() if not n.startswith("lm."))
    # the targets: GPT-Neo's q/k/v_proj and out_proj (o_proj is Llama's: not in this backbone)
    adapted = {n.split(".lora_")[0].rsplit(".", 1)[-1] for n, _ in pol.named_parameters()}
    assert {"q_proj", "k_proj", "v_proj", "out_proj"} <= adapted
    # one optimizer step as the trainer's engine takes it (AdamW over what requires grad)
    _nudge(pol)
    before = {n: p.detach().clone() for n, p in pol.named_parameters()}
    opt = torch.optim.AdamW([p for p in pol.parameters() if p.requires_grad], lr=1e-2)
    loss = on_policy_loss(pol, tok, CFG)
    loss.backward()
    opt.step()
    for n, p in pol.named_parameters():
        moved = not torch.equal(before[n], p.detach())
        assert moved == (p.grad is not None and bool(p.grad.abs().sum() > 0)), n
        assert p.requires_grad or (p.grad is None and not moved), n
    assert all(
        not torch.equal(before[n], p.detach()) for n, p in pol.named_parameters() if ".lora_" in n
    )


def test_on_policy_log_ratio_is_zero_with_adapters(base):
    pol, tok = make_model(Policy, _cfg(base))
    _nudge(pol, seed=3)
    plain, _ = make_model(Policy, dataclasses.replace(CFG, policy_path=base))
    assert not torch.allclose(pol(IDS).logits, plain(IDS).logits)  # the adapters act
    on_policy_loss(pol, tok, CFG)  # |log ratio| < 1e-4 for every decision


def test_a_checkpoint_holds_the_adapters_names_its_base_and_loads_identically(base, tmp_path):
    base_bytes = Path(base, "model.safetensors").read_bytes()
    digest = hashlib.sha256(base_bytes).hexdigest()
    assert base_digest(base) == digest
    for cls in (Policy, WorldModel):
        model, tok = make_model(cls, _cfg(base))
        _nudge(model, seed=5)
        d = Path(_save(model, tok, tmp_path / cls.KIND))
        files = set(os.listdir(d))
        assert ADAPTERS in files and not files & {"model.safetensors", "config.json"}
        weights = sum((d / f).stat().st_size for f in files if f.endswith(".safetensors"))
        assert weights < len(base_bytes) / 2, (weights, len(base_bytes))  # no base in there
        meta = json.loads((d / "dynaweb.json").read_text())
        assert meta["base"] == {"path": base, "sha256": digest}
        assert meta["spec"]["lora_rank"] == 4 and meta["spec"]["lora_alpha"] == 8.0
        again, _ = load_model(cls, str(d))
        with torch.no_grad():
            assert torch.equal(again(IDS).logits, model(IDS).logits)
        assert again.state_dict().keys() == model.state_dict().keys()
        for k, v in model.state_dict().items():
            assert torch.equal(again.state_dict()[k], v), k
        assert again.base_ref == meta["base"]


def test_the_trainer_state_leaves_the_frozen_base_out(base, tmp_path):
    """DeepSpeed's state beside a checkpoint: the optimizer and the weights that train, not the
    base (the tied output head, the embeddings' second name, included)."""
    pol, _ = make_model(Policy, _cfg(base))
    save_engine_state(make_engine(pol, 1e-3), str(tmp_path / "state"))
    size = sum(f.stat().st_size for f in (tmp_path / "state").rglob("*") if f.is_file())
    assert size < Path(base, "model.safetensors").stat().st_size / 2, size


def test_a_reader_with_another_base_refuses_the_checkpoint(base, tmp_path):
    mine = _base(tmp_path / "base", seed=0)
    pol, tok = make_model(Policy, _cfg(mine))
    d = _save(pol, tok, tmp_path / "p")
    _base(tmp_path / "base", seed=7)  # the base at that path is another model here
    theirs = base_digest(mine)
    with pytest.raises(BaseMismatch) as e:
        load_model(Policy, d)
    msg = str(e.value)
    assert pol.base_ref["sha256"] in msg and theirs in msg and mine in msg
    assert isinstance(e.value, ValueError)


def test_lora_needs_a_base_model():
    with pytest.raises(ValueError, match="need a base model"):
        make_model(Policy, dataclasses.replace(CFG, policy_lora_rank=4))
    cfg = Config()
    cfg.model.world_model_lora_rank = 2
    assert any("model.world_model_lora_rank" in p for p in cfg.problems())


def test_a_lora_world_model_predicts_and_decodes_lean(base):
    wm, tok = make_model(WorldModel, _cfg(base))
    _nudge(wm, seed=9)
    assert LeanStep.supports(wm.lm)  # the adapters are folded into the weights it reads
    g = torch.Generator().manual_seed(1)
    page = torch.randint(3, 2000, (40,), generator=g).tolist()
    prompts = [page + torch.randint(3, 2000, (n,), generator=g).tolist() for n in (3, 9, 1)]
    with torch.no_grad():
        a, _ = generate_tokens(wm, prompts, 20, 0, 1, 256, ignore_eos=True, lean=True)
        b, _ = generate_tokens(wm, prompts, 20, 0, 1, 256, ignore_eos=True, lean=False)
    assert a == b
    r = WorldModelRunner(wm, tok, DreamConfig(max_change_tokens=24))
    preds = r.predict([WM_A, WM_A2], [Action.type(1, "Kiera"), "click(4)"])
    assert len(preds) == 2 and all(p.next_obs is not None for p in preds)


class _Store:
    """Checkpoint folders by version (the slot's store: ``latest`` and ``download``)."""

    def __init__(self) -> None:
        self.dirs: dict[int, str] = {}

    def latest(self, kind: str) -> dict | None:
        return {"version": max(self.dirs), "manifest_sha256": None} if self.dirs else None

    def download(self, kind, version, dest, manifest_sha256=None, only=None) -> dict:
        shutil.copytree(self.dirs[version], Path(dest) / "hf")
        return {"extra": {}}


def test_a_slot_hot_reloads_adapters_onto_the_base_it_holds(base, tmp_path):
    store = _Store()
    slot = ModelSlot(store, "policy", tmp_path / "work", "r-lora")
    pol, tok = make_model(Policy, _cfg(base))
    _nudge(pol, seed=1)
    store.dirs[1] = _save(pol, tok, tmp_path / "v1")
    assert slot.refresh() and slot.version == 1
    v1 = slot.model
    with torch.no_grad():
        out1 = v1(IDS).logits
    _nudge(pol, seed=2)  # a training step later
    store.dirs[2] = _save(pol, tok, tmp_path / "v2")
    assert slot.prefetch()  # loaded beside the model in use, which is untouched
    with torch.no_grad():
        assert torch.equal(v1(IDS).logits, out1)
    assert slot.install() and slot.version == 2
    v2 = slot.model
    assert v2 is not v1
    # the base's tensors are the ones already held (not read again), the adapters are v2's
    assert v2.lm.transformer.wte.weight is v1.lm.transformer.wte.weight
    assert v2.lm.transformer.h[0].attn.attention.q_proj.base_layer.weight is (
        v1.lm.transformer.h[0].attn.attention.q_proj.base_layer.weight
    )
    fresh, _ = load_model(Policy, store.dirs[2])
    with torch.no_grad():
        assert torch.equal(v2(IDS).logits, fresh(IDS).logits)
        assert torch.equal(v2(IDS).logits, pol(IDS).logits)
        assert not torch.equal(v2(IDS).logits, out1)
    # v3 stands on a base this reader does not have: refused, v2 kept
    other = _base(tmp_path / "other", seed=3)
    theirs, _ = make_model(Policy, _cfg(other))
    store.dirs[3] = _save(theirs, tok, tmp_path / "v3")
    _base(tmp_path / "other", seed=4)  # this reader's file at that path differs
    assert not slot.refresh()
    assert slot.version == 2 and slot.model is v2 and 3 in slot.refused
