"""What the policy and the world model share: a causal-LM backbone and the instruction-match
input feature, declared in one constructor (``LanguageModel``), and their saved form.

``LanguageModel`` holds ``lm``, any Hugging Face causal-LM class (GPT-Neo built from
``ModelConfig``, or a local directory), and ``match``, the exact-match feature
(``models.lm.match.MatchFeature``) or None.  Its ``forward`` takes the match flags as an
argument: a caller that feeds a prompt in pieces (a shared prefix, then each row's tail) passes
the flags of the pieces it feeds (``match_flags``); without them, the rows' own tokens are
flagged when they hold a whole prompt (two or more tokens; a cached decoding step feeds one
token, never flagged).  The flagged tokens' input embeddings get the feature's vector added,
and the LM runs on those embeddings, so every path (training loss, prefill, cached decoding,
the heads' forward) sees the same inputs with no hidden state.

Saved form (``save_parts``, ``read_parts``): the backbone as a Hugging Face directory
(``config.json``, ``model.safetensors``, the tokenizer), the model's own modules in
``parts.safetensors`` and what the model is in ``dynaweb.json`` (``kind``, ``spec``, ``state``,
``format``).  A backbone with LoRA adapters (``models.lm.lora``) saves the adapters only, and
``dynaweb.json``'s ``base`` names the base model they stand on.  A directory saved before this
layout (the parts inside ``model.safetensors``, flags in ``config.json``) is read by
``migrate_legacy``, the one place that knows the old form.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

import torch

from models.lm.match import MatchFeature, match_flags
from models.lm.types import CausalLM

if TYPE_CHECKING:
    from transformers import PretrainedConfig

FORMAT = 2  # dynaweb.json's layout; a directory without the file is the legacy layout
META = "dynaweb.json"
PARTS = "parts.safetensors"


class LanguageModel(torch.nn.Module):
    """``lm`` (a Hugging Face causal LM), ``match`` (the instruction-match feature or None) and
    ``base_ref`` (the base model LoRA adapters on ``lm`` stand on, None without adapters)."""

    spec: Any  # the subclass's spec (saved in ``dynaweb.json``)

    def __init__(
        self, lm: CausalLM, match: MatchFeature | None, base_ref: dict[str, str] | None = None
    ) -> None:
        super().__init__()
        self.lm = lm
        self.match = match
        # the base model LoRA adapters on ``lm`` stand on, ``{"path", "sha256"}``
        # (``models.lm.lora.base_ref``); None without adapters
        self.base_ref = base_ref

    @property
    def config(self) -> PretrainedConfig:
        """The backbone's Hugging Face config (hidden size, positions, ...)."""
        return self.lm.config

    @property
    def hidden_size(self) -> int:
        return int(self.lm.get_input_embeddings().weight.shape[1])

    @property
    def max_positions(self) -> int:
        return int(getattr(self.lm.config, "max_position_embeddings", 0) or 0)

    def prompt_flags(self, prompts: list[list[int]]) -> list[list[bool]] | None:
        """``match_flags`` of each whole prompt; None without the feature."""
        m = self.match
        return None if m is None else [match_flags(p, m.pieces, m.end_mark) for p in prompts]

    def _embeds(
        self, input_ids: torch.Tensor | None, flags: torch.Tensor | None
    ) -> torch.Tensor | None:
        """The input embeddings with the feature added, or None where nothing is flagged (the
        LM then embeds ``input_ids`` itself: the same numbers)."""
        m = self.match
        if m is None or input_ids is None or input_ids.dim() != 2:
            return None
        if flags is not None:
            if tuple(flags.shape) != tuple(input_ids.shape):
                raise ValueError(
                    f"match flags {tuple(flags.shape)} != input {tuple(input_ids.shape)}"
                )
            flags = flags.to(input_ids.device)
        elif input_ids.shape[1] < 2:
            return None  # cached decoding (one new token): never flagged
        else:
            flags = m.flags(input_ids)
        if not bool(flags.any()):
            return None
        emb = self.lm.get_input_embeddings()(input_ids)
        return emb + flags.unsqueeze(-1).to(emb.dtype) * m.weight.to(emb.dtype)

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        match_flags: torch.Tensor | None = None,
        lm_head: bool = True,
        **kwargs: Any,
    ) -> Any:
        """The LM's forward (logits, cache, hidden states as asked in ``kwargs``) on
        ``input_ids``; ``match_flags``: the flags of these ids (same shape), for callers that
        feed a prompt in pieces; ``lm_head`` False: the backbone without its LM head
        (``last_hidden_state``, see ``base``)."""
        emb = self._embeds(input_ids, match_flags)
        run = self.lm if lm_head else self.lm.base_model
        if emb is None:
            return run(input_ids=input_ids, **kwargs)
        return run(inputs_embeds=emb, **kwargs)

    def base(
        self, input_ids: torch.Tensor, match_flags: torch.Tensor | None = None, **kwargs: Any
    ) -> Any:
        """The backbone without its LM head (``last_hidden_state``): one call of this module, so
        what hooks the module (``evaluation.bench.mfu.FlopMeter``) sees it."""
        return self(input_ids, match_flags=match_flags, lm_head=False, **kwargs)

    def logits_at(self, hidden: torch.Tensor) -> torch.Tensor:
        """The LM head on the last-layer states ``hidden`` (..., d) -> (..., vocabulary): the
        learners run it on the positions their loss reads only, so a batch's logits are bounded
        by its target tokens, not by its rows times the whole vocabulary."""
        return self.lm.get_output_embeddings()(hidden)


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


def state_has_every_weight(path: str | os.PathLike[str], module: torch.nn.Module) -> bool:
    """Whether the trainer's optimizer state saved beside the model in ``path`` holds every weight
    of ``module`` (it is then loaded strictly): not for the legacy layout (the weights come from
    ``path``) nor for a model with a frozen base (LoRA: the state holds the weights that train
    only, ``models.checkpoints.writer.save_engine_state``)."""
    saved = os.path.exists(os.path.join(path, META))
    return saved and all(p.requires_grad for p in module.parameters())
