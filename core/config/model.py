"""The ``model`` configuration section (``ModelConfig``): the policy's and the world model's
architecture, tokenizer and optional parts.  Composed into ``core.config.Config`` like every
other section."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from core.config.fields import _f


@dataclass
class ModelConfig:
    layers: int = _f(4, "Transformer layers (policy and world model, from config).")
    d_model: int = _f(256, "Hidden size.")
    heads: int = _f(4, "Attention heads.")
    max_positions: int = _f(1024, "Context length (tokens).")
    policy_path: str = _f("", "Local Hugging Face directory for the policy (empty = from config).")
    world_model_path: str = _f(
        "", "Local Hugging Face directory for the world model (empty = from config)."
    )
    policy_lora_rank: int = _f(
        0,
        "LoRA adapters on the policy's backbone (models/lm/lora.py): their rank, 0 = off (every "
        "weight trains). On: the base model at policy_path is frozen, the adapters and the "
        "policy's own parts train, and checkpoints hold the adapters and parts only, naming the "
        "base by its sha256 (a reader on another base refuses them). Needs policy_path.",
        ge=0,
    )
    world_model_lora_rank: int = _f(
        0,
        "LoRA adapters on the world model's backbone: their rank, 0 = off (as policy_lora_rank; "
        "needs world_model_path).",
        ge=0,
    )
    world_model_ensemble: int = _f(
        4,
        "Bootstrapped reward/done heads of the world model (models/world_model/ensemble.py): K "
        "linear members on the heads' input (detached from the trunk), each trained on its own "
        "double-or-nothing bootstrap of every batch. The spread of their p(success) is the "
        "disagreement dreams act on (dream.pessimism, dream.max_disagreement). 0 = none. Part of "
        "the model's spec: a run whose stored world model has another number is refused "
        "(models/checkpoints/spec.py); a world model started from (trainer.wm_init_from, "
        "trainer.init_from) gets fresh members.",
        ge=0,
    )
    lora_alpha: float = _f(
        0.0,
        "LoRA scale numerator of both models' adapters (the update is alpha / rank x B A); "
        "0 = 2 x rank. Adapter dropout is always 0, so the learner's recomputed log-probs are "
        "acting's.",
        ge=0,
    )
    lora_targets: list[str] = _f(
        ["q_proj", "k_proj", "v_proj", "o_proj", "out_proj"],
        "Module names the LoRA adapters wrap (those the backbone has): the attention projections "
        "of Llama/Qwen-style models (q/k/v/o_proj) and of GPT-Neo (q/k/v_proj, out_proj).",
    )
    seed: int = _f(0, "Initialisation seed.")
    policy_match_feature: bool = _f(
        False,
        "Policy built from config: add a learned vector to the input embedding of every page "
        "token that is part of a word also in the task instruction, as the world model has it, "
        "up to the 'Action:' line (models/lm/match.py). A loaded policy keeps "
        "what it was saved with.",
    )
    policy_pointer: bool = _f(
        True,
        "Policy built from config: its element head (the name 'pointer' is kept for the studies' "
        "settings) adds to the score of every candidate action that names a page "
        "element a learned read-out of that element's page line (the element-wise max of the last "
        "layer's states, and whether the line holds a word of the instruction; "
        "models/policy/element_head.py; zero at init). A loaded policy keeps what it was saved with. The "
        "sample-efficiency study sets it from experiment.policy_pointer (off: the frozen study).",
    )
    instruction_match: bool = _f(
        True,
        "Models built from config (or on a base model): the hand-written instruction-match "
        "parts, which flag what also appears as a word of the task instruction: the policy's "
        "element head's instruction-word bit, the world model's exact-match input feature and its "
        "named-lines layer (models/lm/match.py). Off: the models learn the match themselves "
        "(as a pretrained LLM can). A loaded model keeps what it was saved with.",
    )
    tokenizer: Literal["bpe", "byte"] = _f(
        "bpe",
        "Tokenizer of models built from config: 'bpe' (byte-level BPE, 2,048 ids, trained on the "
        "project's own pages, actions and change scripts, shipped in models/assets/tokenizer-bpe; ~3.3x fewer "
        "tokens than 'byte') or 'byte' (ByT5, one token per UTF-8 byte). A model loaded from a directory "
        "(policy_path, world_model_path, checkpoints) always uses the tokenizer saved with it.",
    )

    continue_stored: bool = _f(
        False,
        "Continue this run id's stored checkpoints even when they were written for another model "
        "(backbone, sizes, tokenizer, LoRA base: models/checkpoints/spec.py) than these settings "
        "ask for; the stored model then stays. Off: such a start stops with an error naming both "
        "(use a new run id for the new model).",
    )

    def checks(self) -> list[tuple[str, str]]:
        """LoRA adapters need a base model to stand on (a model built from config has none)."""
        out = []
        for kind, path in (("policy", self.policy_path), ("world_model", self.world_model_path)):
            if getattr(self, f"{kind}_lora_rank") > 0 and not path:
                out.append(
                    (
                        f"{kind}_lora_rank",
                        f"LoRA adapters need a base model: set model.{kind}_path "
                        "(a GGUF file, package:NAME/FILE or a Hugging Face directory)",
                    )
                )
        return out
