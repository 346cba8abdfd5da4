"""The types the models' code names for what Hugging Face builds: ``Tokenizer`` and ``CausalLM``.

``Tokenizer``: every tokenizer a model carries (the shipped BPE, a ``transformers`` fast
tokenizer; the byte tokenizer, ``ByT5Tokenizer``; a pretrained model's own) is a
``transformers.PreTrainedTokenizerBase``; the code calls it only through
``models.lm.tokenizer`` (``encode``, ``decode``, ``eos_id``, ``pad_id``) and ``len``.
``CausalLM``: the backbone inside ``models.lm.base.LanguageModel.lm``, a
``transformers.PreTrainedModel`` with a causal-LM head (GPT-Neo built from ``ModelConfig``, a
local directory, a GGUF file), possibly with LoRA adapters injected (``models.lm.lora``).

Both are names for type checkers only: importing this module imports no ``transformers``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

Tokenizer: TypeAlias = "PreTrainedTokenizerBase"
CausalLM: TypeAlias = "PreTrainedModel"
