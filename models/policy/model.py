"""The policy as one module: ``Policy`` declares every part in its constructor.

- ``lm``: the causal-LM backbone (``models.lm.base.LanguageModel``; GPT-Neo from
  ``ModelConfig`` or a local Hugging Face directory, ``model.policy_path``);
- ``match``: the instruction-match input feature, flagged up to the prompt's ``Action:`` line
  (``PolicySpec.match_feature``; ``models.lm.match``);
- ``element_head``: the read-out of the page line of the element a candidate names
  (``PolicySpec.element_head``; ``models.policy.element_head``).

``PolicySpec`` is saved beside the weights (``dynaweb.json``); ``Policy.save_pretrained(dir)``
and ``load_policy(dir)`` write and read the whole policy in one call, a directory in the legacy
layout through ``models.lm.base.migrate_legacy``.  Acting is ``models.policy.runner``, the loss
``models.policy.loss``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from core.config.model import ModelConfig
from models.lm.backbone import load_causal_lm, make_causal_lm, resolve_model_path
from models.lm.base import LanguageModel, is_saved_model, legacy_names, save_parts, saved_parts
from models.lm.lora import (
    LoraShape,
    add_lora,
    load_adapted,
    lora_fields,
    new_base_ref,
    save_adapters,
)
from models.lm.match import POLICY_END, MatchFeature, token_pieces
from models.lm.types import CausalLM, Tokenizer
from models.policy.element_head import ElementHead

KIND = "policy"


@dataclass(frozen=True)
class PolicySpec:
    """What a policy is made of beside its backbone (saved in ``dynaweb.json``)."""

    match_feature: bool = False  # the instruction-match input feature (``models.lm.match``)
    element_head: bool = False  # the element head (``models.policy.element_head``)
    element_named: bool = True  # ... with its instruction-word bit (``ElementHead.named``)
    lora_rank: int = 0  # LoRA adapters on the backbone (``models.lm.lora``), 0: none
    lora_alpha: float = 0.0
    lora_targets: str = ""  # the module names the adapters wrap, comma-joined

    @staticmethod
    def of(model_cfg: ModelConfig) -> PolicySpec:
        """The spec a policy built from ``model_cfg`` gets."""
        return PolicySpec(
            match_feature=bool(model_cfg.policy_match_feature),
            element_head=bool(model_cfg.policy_pointer),
            element_named=bool(model_cfg.instruction_match),
            **lora_fields(model_cfg.policy_lora_rank, model_cfg.lora_alpha, model_cfg.lora_targets),
        )


class Policy(LanguageModel):
    """The backbone, the match feature and the element head (the last two None when the spec
    leaves them out); ``tokenizer`` is needed for the parts' token texts."""

    def __init__(
        self,
        lm: CausalLM,
        tokenizer: Tokenizer,
        spec: PolicySpec,
        base_ref: dict[str, str] | None = None,
    ) -> None:
        lm = add_lora(lm, LoraShape.of(spec))  # the base frozen, when the spec has adapters
        dim = int(lm.get_input_embeddings().weight.shape[1])
        dev = lm.get_input_embeddings().weight.device
        pieces = token_pieces(tokenizer) if (spec.match_feature or spec.element_head) else []
        match = MatchFeature(dim, pieces, POLICY_END).to(dev) if spec.match_feature else None
        super().__init__(lm, match, base_ref)
        self.spec = spec
        self.element_head = (
            ElementHead(dim, pieces, spec.element_named).to(dev) if spec.element_head else None
        )

    def parts(self) -> dict[str, torch.nn.Module | None]:
        """The modules saved in ``parts.safetensors``."""
        return {"match": self.match, "element_head": self.element_head}

    def save_pretrained(self, path: str) -> None:
        """The backbone as a Hugging Face directory (with LoRA adapters: the adapters, and the
        base they stand on named) plus the parts and the spec (the tokenizer is saved by its own
        ``save_pretrained``)."""
        base = save_adapters(self, path)
        save_parts(self, path, KIND, dataclasses.asdict(self.spec), {}, self.parts(), base)


def make_policy(model_cfg: ModelConfig) -> tuple[Policy, Tokenizer]:
    """(policy, tokenizer): a policy this project saved at ``model_cfg.policy_path``
    (``load_policy``), or a new one (the spec of ``PolicySpec.of``, new parts at zero) on the base
    model there (a GGUF file, ``package:NAME/FILE``, a Hugging Face directory), or on GPT-Neo
    built from config; with ``model.policy_lora_rank``, LoRA adapters on the base model there."""
    path = model_cfg.policy_path
    if path and is_saved_model(resolve_model_path(path), KIND):
        return load_policy(path)
    # a base model (a GGUF file, a Hugging Face directory) or GPT-Neo from config: fresh parts
    spec = PolicySpec.of(model_cfg)
    base = new_base_ref(path, spec.lora_rank, "policy")
    lm, tok = load_causal_lm(path) if path else make_causal_lm(model_cfg)
    return Policy(lm, tok, spec, base_ref=base).eval(), tok


def load_policy(
    path: str, reuse: tuple[Policy, Tokenizer] | None = None
) -> tuple[Policy, Tokenizer]:
    """A saved policy (``Policy.save_pretrained`` and the tokenizer in one directory; or the
    legacy layout), with its spec and its parts' saved weights.  A LoRA policy's base is read
    from the path its ``dynaweb.json`` names, its sha256 checked (``models.lm.lora.BaseMismatch``);
    ``reuse``: a loaded policy (and its tokenizer) whose base is shared instead when it is the
    same (``models.lm.lora.load_adapted``: a reader's hot reload reads the adapters only)."""
    path = resolve_model_path(path)
    meta, parts = saved_parts(path, KIND)
    legacy = int(meta.get("format", 1)) < 2
    spec = PolicySpec(**meta["spec"])
    if spec.lora_rank:
        policy, tok = load_adapted(
            path, meta, lambda lm, t, ref: Policy(lm, t, spec, base_ref=ref), reuse
        )
    else:
        lm, tok = load_causal_lm(path, own=legacy_names(KIND) if legacy else ())
        policy = Policy(lm, tok, spec)
    for name, module in policy.parts().items():
        if module is not None and name in parts:
            module.load_state_dict(parts[name])
        elif module is not None and not legacy:
            raise ValueError(f"{path}: the policy's spec has {name!r} but its weights are missing")
    return policy.eval(), tok
