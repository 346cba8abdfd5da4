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

A model's saved form, and the one loader of both models, is ``models.lm.saved``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

import torch

from models.lm.match import MatchFeature, match_flags
from models.lm.types import CausalLM

if TYPE_CHECKING:
    from transformers import PretrainedConfig


class LanguageModel(torch.nn.Module):
    """``lm`` (a Hugging Face causal LM), ``match`` (the instruction-match feature or None) and
    ``base_ref`` (the base model LoRA adapters on ``lm`` stand on, None without adapters)."""

    # "policy" or "world_model": ``dynaweb.json``'s kind, the config's ``<kind>_path``
    KIND: ClassVar[str]
    SPEC: ClassVar[type]  # the spec's class (``SPEC.of(model_cfg)``, ``SPEC(**saved)``)
    SEED_OFFSET: ClassVar[int] = 0  # added to ``model.seed`` for a GPT-Neo built from config
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

    def parts(self) -> dict[str, torch.nn.Module | None]:
        """The model's own modules beside the backbone, by name (saved in ``parts.safetensors``;
        None: a part the spec leaves out)."""
        return {}

    def saved_state(self) -> dict:
        """What training made of the model beyond its weights (``dynaweb.json``'s ``state``)."""
        return {}

    def restore_state(self, meta: dict, parts: dict[str, dict[str, torch.Tensor]]) -> None:
        """Take ``saved_state`` back from a saved model's ``dynaweb.json`` (``meta``) and the
        parts its file holds (``models.lm.saved.load_model``)."""

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
