"""The policy as one module: ``Policy`` declares every part in its constructor.

- ``lm``: the causal-LM backbone (``models.lm.types.CausalLM``; GPT-Neo from ``ModelConfig``, a
  local Hugging Face directory or a GGUF file, ``model.policy_path``), with LoRA adapters when the
  spec has them (``models.lm.lora``; ``base_ref``, a constructor argument, names their base);
- ``match``: the instruction-match input feature, flagged up to the prompt's ``Action:`` line
  (``PolicySpec.match_feature``; ``models.lm.match``);
- ``element_head``: the read-out of the page line of the element a candidate names
  (``PolicySpec.element_head``; ``models.policy.element_head``).

``PolicySpec`` is saved beside the weights (``dynaweb.json``); ``Policy.save_pretrained(dir)``
and ``models.lm.saved.load_model(Policy, dir)`` write and read the whole policy in one call, a
directory in the legacy layout through ``models.lm.saved.migrate_legacy``;
``models.lm.saved.make_model(Policy, model_cfg)`` builds one from config.  What the policy's
probability of an action is: ``models.policy.log_pi``; acting: ``models.policy.runner``; the loss:
``models.policy.loss``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from core.config.model import ModelConfig
from models.lm.base import LanguageModel
from models.lm.lora import LoraShape, add_lora, lora_fields
from models.lm.match import POLICY_END, MatchFeature, token_pieces
from models.lm.saved import save_model
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

    KIND = KIND
    SPEC = PolicySpec

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
        """The whole policy in ``path`` (``models.lm.saved.save_model``; the tokenizer is saved
        by its own ``save_pretrained``); ``models.lm.saved.load_model(Policy, path)`` reads it
        back."""
        save_model(self, path)
