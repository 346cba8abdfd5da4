"""A model's saved form, and the one loader of both models (``Policy``, ``WorldModel``).

Saved form (``save_model``): the backbone as a Hugging Face directory (``config.json``,
``model.safetensors``, the tokenizer), the model's own modules (``parts()``) in
``parts.safetensors`` and what the model is in ``dynaweb.json`` (``kind``, ``spec``, ``state``,
``format``).  A backbone with LoRA adapters (``models.lm.lora``) saves the adapters only, and
``dynaweb.json``'s ``base`` names the base model they stand on.  A directory saved before this
layout (the parts inside ``model.safetensors``, flags in ``config.json``) is read by
``migrate_legacy``, the one place that knows the old form.

Loading: ``load_model(cls, path)`` reads a model of class ``cls`` saved by this project (either
layout, with or without adapters); ``make_model(cls, model_cfg)`` gives that, or a new model on
the base model the config names (a GGUF file, ``package:NAME/FILE``, a Hugging Face directory),
or on GPT-Neo built from the config.  A model class declares what the loader needs: ``KIND``
(``"policy"``, ``"world_model"``: the config's ``<kind>_path``), ``SPEC`` (its spec class, with
``SPEC.of(model_cfg)``), ``SEED_OFFSET`` (added to ``model.seed`` for a GPT-Neo built from
config), a constructor ``cls(lm, tokenizer, spec, base_ref=...)``, ``parts()``,
``saved_state()`` and ``restore_state(meta, parts)``.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import TypeVar

import torch

from core.config.model import ModelConfig
from models.lm.backbone import load_causal_lm, make_causal_lm, resolve_model_path
from models.lm.base import LanguageModel
from models.lm.lora import check_base, load_adapters, new_base_ref, save_adapters, share_base
from models.lm.types import Tokenizer

FORMAT = 2  # dynaweb.json's layout; a directory without the file is the legacy layout
META = "dynaweb.json"
PARTS = "parts.safetensors"

M = TypeVar("M", bound=LanguageModel)


def make_model(
    cls: type[M], model_cfg: ModelConfig, spec: object | None = None
) -> tuple[M, Tokenizer]:
    """(model, tokenizer): a model of ``cls`` this project saved at ``model_cfg.<KIND>_path``
    (``load_model``), or a new one (``spec``, default ``cls.SPEC.of(model_cfg)``; new parts) on
    the base model there (a GGUF file, ``package:NAME/FILE``, a Hugging Face directory) or on
    GPT-Neo built from config (seed + ``cls.SEED_OFFSET``); with the spec's ``lora_rank``, LoRA
    adapters on the base model there."""
    path = getattr(model_cfg, f"{cls.KIND}_path")
    if path and is_saved_model(resolve_model_path(path), cls.KIND):
        return load_model(cls, path)
    spec = spec or cls.SPEC.of(model_cfg)
    base = new_base_ref(path, spec.lora_rank, cls.KIND)
    if path:
        lm, tok = load_causal_lm(path)
    elif cls.SEED_OFFSET:
        lm, tok = make_causal_lm(
            dataclasses.replace(model_cfg, seed=model_cfg.seed + cls.SEED_OFFSET)
        )
    else:
        lm, tok = make_causal_lm(model_cfg)
    return cls(lm, tok, spec, base_ref=base).eval(), tok


def load_model(
    cls: type[M], path: str, reuse: tuple[M, Tokenizer] | None = None
) -> tuple[M, Tokenizer]:
    """A saved model of ``cls`` (``save_model`` and the tokenizer in one directory; or the legacy
    layout: a part its file lacks starts fresh, and ``restore_state`` sees which it lacks), with
    its spec, its state and its parts' saved weights.  A LoRA model's base is read from the path
    its ``dynaweb.json`` names, its sha256 checked (``models.lm.lora.BaseMismatch``); ``reuse``:
    a loaded model (and its tokenizer) whose base is shared instead when it is the same
    (``models.lm.lora.share_base``: a reader's hot reload reads the adapters only)."""
    path = resolve_model_path(path)
    meta, parts = saved_parts(path, cls.KIND)
    legacy = int(meta.get("format", 1)) < 2
    spec = cls.SPEC(**meta["spec"])
    if spec.lora_rank:
        model, tok = _load_adapted(cls, path, meta, spec, reuse)
    else:
        lm, tok = load_causal_lm(path, own=legacy_names(cls.KIND) if legacy else ())
        model = cls(lm, tok, spec)
    model.restore_state(meta, parts)
    for name, module in model.parts().items():
        if module is not None and name in parts:
            module.load_state_dict(parts[name])
        elif module is not None and not legacy:
            kind = cls.KIND.replace("_", " ")
            raise ValueError(f"{path}: the {kind} has {name!r} but its weights are missing")
    return model.eval(), tok


def _load_adapted(
    cls: type[M], path: str, meta: dict, spec: object, reuse: tuple[M, Tokenizer] | None
) -> tuple[M, Tokenizer]:
    """(model, tokenizer) of the LoRA model saved in ``path`` (``meta``: its ``dynaweb.json``),
    adapters loaded, parts left to the caller.

    ``reuse`` (a loaded model and its tokenizer) on the same base (digest) with the same spec:
    ``share_base`` of it.  Else the base is read from ``meta["base"]["path"]`` after its digest is
    checked (``BaseMismatch``), and ``cls`` makes the model (adapters added by its constructor,
    per its spec)."""
    ref = meta.get("base")
    if not isinstance(ref, dict) or not ref.get("path") or not ref.get("sha256"):
        raise ValueError(f"{path}: a LoRA model without its base (dynaweb.json's 'base')")
    if reuse is not None and _same(reuse[0], meta):
        model, tok = share_base(reuse[0]), reuse[1]
    else:
        check_base(ref, path)
        lm, tok = load_causal_lm(ref["path"])
        model = cls(lm, tok, spec, base_ref=dict(ref))
    load_adapters(model.lm, path)
    return model.eval(), tok


def _same(model: LanguageModel, meta: dict) -> bool:
    """Whether ``model`` stands on the base ``meta`` names, with the spec it saves."""
    ref = model.base_ref
    return (
        ref is not None
        and ref.get("sha256") == meta["base"]["sha256"]
        and dataclasses.asdict(model.spec) == meta.get("spec")
    )


def save_model(model: LanguageModel, path: str) -> None:
    """``model`` into ``path``: the backbone (with LoRA adapters: the adapters, and the base they
    stand on named), the parts, the spec and the state (the tokenizer is saved by its own
    ``save_pretrained``)."""
    spec, state = dataclasses.asdict(model.spec), model.saved_state()
    base = save_adapters(model, path)
    save_parts(model, path, model.KIND, spec, state, model.parts(), base)


def save_parts(
    model: LanguageModel,
    path: str,
    kind: str,
    spec: dict,
    state: dict,
    own: dict,
    base: dict | None = None,
) -> None:
    """Write ``model``'s backbone (``save_pretrained``), its own modules ``own`` (name -> module)
    into ``parts.safetensors`` and ``dynaweb.json``.  ``base``: the base model the LoRA adapters
    on the backbone stand on (``models.lm.lora.save_adapters`` wrote them): the backbone is not
    saved, ``dynaweb.json`` names the base instead."""
    from safetensors.torch import save_file

    if base is None:
        model.lm.save_pretrained(path)
    else:
        os.makedirs(path, exist_ok=True)
    tensors = {
        f"{name}.{k}": v.detach().cpu().contiguous()
        for name, mod in own.items()
        if mod is not None
        for k, v in mod.state_dict().items()
    }
    save_file(tensors, os.path.join(path, PARTS))
    meta = {"format": FORMAT, "kind": kind, "spec": spec, "state": state}
    if base is not None:
        meta["base"] = base
    with open(os.path.join(path, META), "w") as f:
        json.dump(meta, f, indent=1, sort_keys=True)


def read_parts(path: str) -> tuple[dict, dict[str, dict[str, torch.Tensor]]] | None:
    """(``dynaweb.json``, name -> state dict of each saved part), or None for a directory in
    the legacy layout (``migrate_legacy``)."""
    meta_path = os.path.join(path, META)
    if not os.path.exists(meta_path):
        return None
    with open(meta_path) as f:
        meta = json.load(f)
    if int(meta.get("format", 0)) > FORMAT:
        raise ValueError(
            f"{path}: saved in format {meta.get('format')}, this build reads up to {FORMAT}"
        )
    from safetensors.torch import load_file

    saved = load_file(os.path.join(path, PARTS))
    return meta, split_state(saved)


def split_state(saved: dict[str, torch.Tensor]) -> dict[str, dict[str, torch.Tensor]]:
    """``{"a.w": t}`` -> ``{"a": {"w": t}}``."""
    out: dict[str, dict[str, torch.Tensor]] = {}
    for key, v in saved.items():
        name, _, rest = key.partition(".")
        out.setdefault(name, {})[rest] = v
    return out


# legacy layout: the saved module names of each model's parts, and the flags in config.json
LEGACY_NAMES = {
    "policy": {"wm_match": "match", "policy_pointer": "element_head"},
    "world_model": {
        "wm_match": "match",
        "page_head": "page_head",
        "reward_head": "reward_head",
        "done_head": "done_head",
        "change_head": "change_head",
        "match_lines": "lines",
    },
}
LEGACY_SPEC = {
    "policy": {"policy_match_feature": "match_feature", "policy_pointer": "element_head"},
    "world_model": {
        "wm_match_feature": "match_feature",
        "wm_head_lines": "head_lines",
        "wm_head_counts": "head_counts",
        "wm_head_acted": "head_acted",
    },
}
LEGACY_STATE = {
    "policy": {},
    "world_model": {
        "wm_heads_trained": "heads_trained",
        "wm_change_head_trained": "change_head_trained",
        "wm_head_feature": "head_feature",
    },
}


def migrate_legacy(path: str, kind: str) -> tuple[dict, dict[str, dict[str, torch.Tensor]]]:
    """The one reader of the legacy layout: (``dynaweb.json``'s content, the parts' state dicts
    under their current names) from a directory whose parts were saved inside
    ``model.safetensors`` and whose flags are in ``config.json``.  A flag the file does not hold
    reads as off (a model saved before that part existed)."""
    with open(os.path.join(path, "config.json")) as f:
        hf = json.load(f)
    spec = {new: bool(hf.get(old, False)) for old, new in LEGACY_SPEC[kind].items()}
    state = {new: hf.get(old, None) for old, new in LEGACY_STATE[kind].items()}
    state = {k: (bool(v) if k != "head_feature" else v) for k, v in state.items()}
    parts: dict[str, dict[str, torch.Tensor]] = {}
    st = os.path.join(path, "model.safetensors")
    if os.path.exists(st):
        from safetensors.torch import load_file

        by_name = split_state(
            {k: v for k, v in load_file(st).items() if k.split(".")[0] in LEGACY_NAMES[kind]}
        )
        parts = {LEGACY_NAMES[kind][k]: v for k, v in by_name.items()}
    meta = {"format": 1, "kind": kind, "spec": spec, "state": state}
    return meta, parts


def is_saved_model(path: str, kind: str) -> bool:
    """True for a directory this project saved as ``kind`` (``dynaweb.json``, or the legacy
    layout's flags in ``config.json``); False for a base model (a GGUF file, a Hugging Face
    directory from elsewhere), whose parts a caller builds fresh."""
    if os.path.exists(os.path.join(path, META)):
        return True
    cfg = os.path.join(path, "config.json")
    if not os.path.isdir(path) or not os.path.exists(cfg):
        return False
    with open(cfg) as f:
        hf = json.load(f)
    return any(k in hf for k in LEGACY_SPEC[kind])


def saved_parts(path: str, kind: str) -> tuple[dict, dict[str, dict[str, torch.Tensor]]]:
    """``read_parts`` or, for the legacy layout, ``migrate_legacy``; a directory saved as another
    kind of model is refused."""
    got = read_parts(path)
    meta, parts = got if got is not None else migrate_legacy(path, kind)
    if meta.get("kind") != kind:
        raise ValueError(f"{path} holds a {meta.get('kind')!r} model, not a {kind!r} one")
    return meta, parts


def legacy_names(kind: str) -> tuple[str, ...]:
    """The module names a legacy ``model.safetensors`` holds beside the backbone's weights (the
    backbone's loader is told they are expected: ``models.lm.backbone.load_causal_lm``)."""
    return tuple(LEGACY_NAMES[kind])


def state_has_every_weight(path: str | os.PathLike, module: torch.nn.Module) -> bool:
    """Whether the trainer's optimizer state saved beside the model in ``path`` holds every weight
    of ``module`` (it is then loaded strictly): not for the legacy layout (the weights come from
    ``path``) nor for a model with a frozen base (LoRA: the state holds the weights that train
    only, ``models.checkpoints.writer.save_engine_state``)."""
    saved = os.path.exists(os.path.join(path, META))
    return saved and all(p.requires_grad for p in module.parameters())
