"""LoRA adapters on a backbone, and the base model an adapter checkpoint stands on.

With ``model.policy_lora_rank`` / ``model.world_model_lora_rank`` above 0 the backbone's target
projections (``model.lora_targets``: the attention's q/k/v/o of Llama/Qwen-style models, GPT-Neo's
q/k/v_proj and out_proj) are wrapped in peft LoRA layers, injected in place
(``peft.inject_adapter_in_model``: the backbone keeps its class, so every forward path, the 4D
tree masks with a KV cache and ``models.lm.lean_decode`` included, runs unchanged).  The base's
weights are frozen; the adapters and the model's own parts (``parts()``) train.  Adapter dropout
is 0, so the learner's recomputed log-probs are acting's.

A LoRA model's saved form (``models.lm.saved.save_model``) holds the adapters
(``adapter_model.safetensors``) and the parts, never the base: ``dynaweb.json`` names it by
``base = {"path", "sha256"}`` (``base_ref``), the path as configured and the sha256 of its weights
file (a GGUF file, or a Hugging Face directory's ``model.safetensors``; ``base_digest``, computed
once per file).  Loading one (``models.lm.saved.load_model``) reads the base from that path, checks its digest
(``BaseMismatch`` otherwise, naming both) and applies the adapters; given a loaded model on the
same base with the same spec (``reuse``), it copies that model with the base's tensors shared
(``share_base``) and loads the new adapters and parts into the copy instead: a reader's hot reload
of an adapter checkpoint does not read the base again, and the model in use is untouched until
the reader swaps it in.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import os
import re
import threading
from typing import Any, TypeVar

import torch

from models.lm.backbone import resolve_model_path
from models.lm.base import LanguageModel
from models.lm.types import CausalLM

ADAPTERS = "adapter_model.safetensors"  # the adapters' weights in a saved LoRA model
ADAPTER = "default"  # peft's adapter name (one adapter per model)
SEED = 4331  # the adapters' initialisation (the same spec gives the same adapters)


M = TypeVar("M", bound=LanguageModel)


class BaseMismatch(ValueError):
    """An adapter checkpoint names a base whose weights are not those at its path here."""


@dataclasses.dataclass(frozen=True)
class LoraShape:
    """What the adapters are: ``rank`` (0: none), ``alpha`` and the ``targets`` (comma-joined
    module names); a spec's ``lora_rank``, ``lora_alpha``, ``lora_targets``."""

    rank: int = 0
    alpha: float = 0.0
    targets: str = ""

    @staticmethod
    def of(spec: Any) -> LoraShape:
        """The adapters a model's spec (``PolicySpec``, ``WorldModelSpec``) declares."""
        return LoraShape(int(spec.lora_rank), float(spec.lora_alpha), str(spec.lora_targets))


def lora_fields(rank: int, alpha: float, targets: list[str]) -> dict[str, Any]:
    """A spec's LoRA fields from the config's (alpha 0: 2 x rank); rank 0: all off."""
    if rank <= 0:
        return {"lora_rank": 0, "lora_alpha": 0.0, "lora_targets": ""}
    a = float(alpha) if alpha > 0 else 2.0 * rank
    return {"lora_rank": int(rank), "lora_alpha": a, "lora_targets": ",".join(targets)}


def add_lora(lm: CausalLM, shape: LoraShape) -> CausalLM:
    """``lm`` with LoRA adapters of ``shape`` injected in place (seeded, dropout 0) and every
    other weight frozen; ``lm`` unchanged for rank 0 or when it holds adapters already.  No
    target module in ``lm``: ValueError."""
    if shape.rank <= 0 or has_adapters(lm):
        return lm
    from peft import LoraConfig, inject_adapter_in_model

    targets = [t for t in shape.targets.split(",") if t]
    config = LoraConfig(
        r=shape.rank,
        lora_alpha=shape.alpha,
        lora_dropout=0.0,
        target_modules=targets,
        bias="none",
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(SEED)
        try:
            lm = inject_adapter_in_model(config, lm, adapter_name=ADAPTER)
        except ValueError as e:
            raise ValueError(f"LoRA targets {targets} match no module of the backbone: {e}") from e
    for name, p in lm.named_parameters():
        p.requires_grad_(".lora_" in name)
    return lm


def has_adapters(module: torch.nn.Module) -> bool:
    """Whether ``module`` holds LoRA adapters."""
    return any(".lora_" in name for name, _ in module.named_parameters())


def adapter_state(lm: CausalLM) -> dict[str, torch.Tensor]:
    """The adapters' weights (peft's names, without the adapter name), on the CPU."""
    from peft import get_peft_model_state_dict

    state = get_peft_model_state_dict(lm, adapter_name=ADAPTER, save_embedding_layers=False)
    return {k: v.detach().cpu().contiguous() for k, v in state.items()}


def save_adapters(model: LanguageModel, path: str) -> dict[str, str] | None:
    """A LoRA model's adapters into ``path`` (``adapter_model.safetensors``) and the base they
    stand on (``base_ref``, for ``dynaweb.json``); None for a model without adapters (its
    backbone is saved whole: ``models.lm.saved.save_parts``)."""
    if not has_adapters(model.lm):
        return None
    if model.base_ref is None:
        raise ValueError("a LoRA model without its base reference cannot be saved")
    from safetensors.torch import save_file

    os.makedirs(path, exist_ok=True)
    save_file(adapter_state(model.lm), os.path.join(path, ADAPTERS))
    return dict(model.base_ref)


def load_adapters(lm: CausalLM, path: str) -> None:
    """The adapters saved in ``path`` into ``lm`` (safetensors; every adapter weight must be
    there and nothing else)."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    saved = load_file(os.path.join(path, ADAPTERS))
    want = set(adapter_state(lm))
    if set(saved) != want:
        raise ValueError(
            f"{path}: the saved adapters do not fit the model (missing "
            f"{sorted(want - set(saved))[:3]}, unexpected {sorted(set(saved) - want)[:3]})"
        )
    got = set_peft_model_state_dict(lm, saved, adapter_name=ADAPTER)
    if got.unexpected_keys:
        raise ValueError(
            f"{path}: adapter weights the model has no place for: {got.unexpected_keys[:3]}"
        )


_DIGESTS: dict[tuple[str, int, int], str] = {}
_DIGEST_LOCK = threading.Lock()


def _sha256(path: str) -> str:
    st = os.stat(path)
    key = (os.path.realpath(path), st.st_size, st.st_mtime_ns)
    with _DIGEST_LOCK:
        if key in _DIGESTS:
            return _DIGESTS[key]
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    with _DIGEST_LOCK:
        _DIGESTS[key] = h.hexdigest()
    return _DIGESTS[key]


def base_digest(path: str) -> str:
    """The sha256 of the base model's weights at ``path`` (``package:`` resolved): a GGUF file's
    bytes, or a Hugging Face directory's ``model.safetensors`` (several ``*.safetensors`` shards:
    the sha256 of their names and digests; a project-saved directory's ``parts.safetensors`` is
    not the base's).  Cached per file (its path, size and mtime)."""
    full = resolve_model_path(path)
    if not os.path.isdir(full):
        return _sha256(full)
    if os.path.exists(os.path.join(full, "model.safetensors")):
        return _sha256(os.path.join(full, "model.safetensors"))
    shards = sorted(f for f in os.listdir(full) if re.fullmatch(r"model-.*\.safetensors", f))
    if not shards:
        raise FileNotFoundError(f"{path}: no model.safetensors to stand LoRA adapters on")
    lines = "".join(f"{s} {_sha256(os.path.join(full, s))}\n" for s in shards)
    return hashlib.sha256(lines.encode()).hexdigest()


def base_ref(path: str) -> dict[str, str]:
    """``{"path", "sha256"}``: the base as configured and its digest (``base_digest``)."""
    return {"path": path, "sha256": base_digest(path)}


def new_base_ref(path: str, rank: int, kind: str) -> dict[str, str] | None:
    """The ``base_ref`` of a new model with adapters of ``rank`` on the base at ``path`` (None for
    rank 0); a model built from config has no base to name: ValueError."""
    if rank <= 0:
        return None
    if not path:
        raise ValueError(
            f"model.{kind}_lora_rank = {rank}: LoRA adapters need a base model "
            f"(model.{kind}_path: a GGUF file, package:NAME/FILE or a Hugging Face directory)"
        )
    return base_ref(path)


def check_base(ref: dict, where: str = "") -> None:
    """``BaseMismatch`` unless the base at ``ref["path"]`` has the digest ``ref["sha256"]``."""
    got = base_digest(ref["path"])
    if got != ref["sha256"]:
        raise BaseMismatch(
            f"{where or 'the checkpoint'}: its adapters stand on the base {ref['path']} with "
            f"sha256 {ref['sha256']}, but the base there has sha256 {got}; refusing to load "
            "(bring the checkpoint's base, or load a checkpoint trained on this one)"
        )


def share_base(model: M) -> M:
    """A copy of ``model`` whose frozen weights and buffers are ``model``'s own tensors (no copy:
    neither model changes them) and whose trainable ones (adapters, parts) are copies."""
    memo: dict[int, Any] = {id(p): p for p in model.parameters() if not p.requires_grad}
    memo.update({id(b): b for b in model.buffers()})
    return copy.deepcopy(model, memo)
