"""The world model as one module: ``WorldModel`` declares every part in its constructor, in the
order their parameters are handed to the optimizer (a resumed optimizer's state is matched by
that order):

- ``lm``: the causal-LM backbone (``models.lm.base.LanguageModel``; GPT-Neo from ``ModelConfig``
  with seed + 1, or a local Hugging Face directory, ``model.world_model_path``);
- ``match``: the instruction-match input feature (``WorldModelSpec.match_feature``;
  ``models.lm.match``);
- ``page_head``: d_model -> 384, the InfoNCE term's projection (``models.lm.embedder.DIM``);
- ``reward_head``, ``done_head``: d_model -> 2 classifiers on the heads' input
  (``WorldModel.head_input``, at ``models.world_model.heads.head_positions``);
- ``change_head``: d_model -> the proposal kinds (``models.world_model.proposals``);
- ``lines``: the named lines' layer, with line counts and the acted line's maximum
  (``WorldModelSpec.head_lines``, ``head_counts``, ``head_acted``; ``models.world_model.lines``);
- ``ensemble``: K bootstrapped reward/done heads on the heads' input, detached
  (``WorldModelSpec.ensemble``, ``model.world_model_ensemble``; ``models.world_model.ensemble``);
  their spread over the members is the disagreement the dreams act on.

The model owns its behaviour: ``WorldModel.forward`` returns one ``WorldModelOutput`` (the LM's
logits, the last layer's states, the KV cache, and as asked the heads' input with the reward,
done and change logits, the pooled change states and the page embedding); ``head_places``,
``head_input``, ``head_logits``, ``head_probs`` and ``embed_page`` are what the runner
(``models.world_model.runner``), the loss (``models.world_model.loss``) and the decoding loop
(``models.world_model.decoding``) call.

The heads start seeded (the same spec gives the same heads); ``WorldModelState`` says whether
the reward/done heads and the change head were trained (``predict`` reads reward and done from
the text until they are).  The trainer marks them after a world-model step
(``mark_heads_trained``: ``models.train.learner.world_model_update``), never the loss.
``WorldModel.save_pretrained(dir)`` and ``models.lm.saved.load_model(WorldModel, dir)`` write
and read the whole model in one call (``dynaweb.json`` holds the spec and the state); a directory
in the legacy layout loads through ``models.lm.saved.migrate_legacy``, with fresh heads and the
flags off for any part its file lacks (``restore_state``); ``models.lm.saved.make_model(
WorldModel, model_cfg)`` builds one from config.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch

from core.config.model import ModelConfig
from models.lm.base import LanguageModel
from models.lm.embedder import DIM
from models.lm.lora import LoraShape, add_lora, lora_fields
from models.lm.match import END, MatchFeature, token_pieces
from models.lm.saved import save_model
from models.lm.types import CausalLM, Tokenizer
from models.world_model.ensemble import EnsembleHeads
from models.world_model.heads import HeadPlaces, head_positions
from models.world_model.lines import Gather, MatchLines, line_positions
from models.world_model.proposals import KINDS

KIND = "world_model"
# what the reward/done heads read (``models.world_model.heads.head_positions``); heads trained
# on another input count as untrained
HEAD_FEATURE = "element_line+action"
HEADS = ("reward_head", "done_head")


@dataclass(frozen=True)
class WorldModelSpec:
    """What a world model is made of beside its backbone (saved in ``dynaweb.json``)."""

    match_feature: bool = True  # the instruction-match input feature
    head_lines: bool = True  # the heads also read the named lines' layer
    head_counts: bool = True  # ... with the line counts (with head_lines)
    head_acted: bool = True  # ... and the acted line's maximum (with head_lines)
    lora_rank: int = 0  # LoRA adapters on the backbone (``models.lm.lora``), 0: none
    lora_alpha: float = 0.0
    lora_targets: str = ""  # the module names the adapters wrap, comma-joined
    # bootstrapped reward/done heads (``models.world_model.ensemble``); 0: none (a model saved
    # before the ensemble reads as 0)
    ensemble: int = 0

    @staticmethod
    def of(model_cfg: ModelConfig) -> WorldModelSpec:
        """The spec a world model built from ``model_cfg`` gets: every part, but the two that
        encode the instruction match by hand (the match feature and the named lines' layer)
        only with ``model.instruction_match``; LoRA adapters with
        ``model.world_model_lora_rank``."""
        on = bool(model_cfg.instruction_match)
        lora = lora_fields(
            model_cfg.world_model_lora_rank, model_cfg.lora_alpha, model_cfg.lora_targets
        )
        k = int(model_cfg.world_model_ensemble)
        return WorldModelSpec(match_feature=on, head_lines=on, ensemble=k, **lora)


@dataclass
class WorldModelState:
    """What training has made of the heads (saved in ``dynaweb.json``)."""

    heads_trained: bool = False  # the reward/done heads, on ``head_feature``
    change_head_trained: bool = False
    head_feature: str | None = None
    ensemble_trained: bool = False  # the ensemble's members (``WorldModelSpec.ensemble``)


def _seeded_linear(dim_in: int, dim_out: int, seed: int) -> torch.nn.Linear:
    g = torch.Generator().manual_seed(seed)
    head = torch.nn.Linear(dim_in, dim_out)
    with torch.no_grad():
        head.weight.copy_(torch.randn(head.weight.shape, generator=g) * 0.02)
        head.bias.zero_()
    return head


@dataclass
class WorldModelOutput:
    """What one forward pass of the world model gives (None: not asked for).

    ``logits``: the LM head's, (B, T, V) on a whole forward, or (n, V) on the positions
    ``logits_at`` names; ``hidden``: the last layer's states (B, T, d) after the final norm;
    ``hidden_states`` and ``past_key_values``: the backbone's, as asked in the forward's keyword
    arguments (``output_hidden_states``, ``use_cache``).  With ``heads`` (``HeadPlaces``):
    ``head_input`` (B, d) and the logits of the reward (task success vs not), done and change
    (proposal kinds) heads on it.  With ``pool`` (a (B, T) mask): ``pooled``, the mean hidden
    state over the masked positions, and with ``page_rows`` ``page_embedding``, the page head on
    those rows of it (the InfoNCE term's prediction)."""

    logits: torch.Tensor | None = None
    hidden: torch.Tensor | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None
    past_key_values: Any = None  # the backbone's KV cache (a transformers ``Cache``)
    head_input: torch.Tensor | None = None
    reward_logits: torch.Tensor | None = None
    done_logits: torch.Tensor | None = None
    change_logits: torch.Tensor | None = None
    ensemble_logits: tuple[torch.Tensor, torch.Tensor] | None = None  # (K, B, 2) reward, done
    pooled: torch.Tensor | None = None
    page_embedding: torch.Tensor | None = None


def gather_rows(hidden: torch.Tensor) -> Gather:
    """``Gather`` of a (B, T, d) tensor: row b's states at the given positions."""
    return lambda b, q: hidden[b, q]


class WorldModel(LanguageModel):
    """The backbone and every head (see the module doc); ``tokenizer`` is needed for the parts'
    token texts."""

    KIND = KIND
    SPEC = WorldModelSpec
    SEED_OFFSET = 1  # GPT-Neo built from config: seed + 1 (the policy has the seed)

    def __init__(
        self,
        lm: CausalLM,
        tokenizer: Tokenizer,
        spec: WorldModelSpec,
        state: WorldModelState | None = None,
        base_ref: dict[str, str] | None = None,
    ) -> None:
        lm = add_lora(lm, LoraShape.of(spec))  # the base frozen, when the spec has adapters
        dim = int(lm.get_input_embeddings().weight.shape[1])
        dev = lm.get_input_embeddings().weight.device
        pieces = token_pieces(tokenizer) if (spec.match_feature or spec.head_lines) else []
        match = MatchFeature(dim, pieces, END).to(dev) if spec.match_feature else None
        super().__init__(lm, match, base_ref)
        self.spec = spec
        self.state = state or WorldModelState()
        self.page_head = _seeded_linear(dim, DIM, 1234).to(dev)
        self.reward_head = _seeded_linear(dim, 2, 4321).to(dev)
        self.done_head = _seeded_linear(dim, 2, 4322).to(dev)
        self.change_head = _seeded_linear(dim, len(KINDS), 4329).to(dev)
        self.lines = (
            MatchLines(dim, pieces, spec.head_counts, spec.head_acted).to(dev)
            if spec.head_lines
            else None
        )
        self.ensemble = EnsembleHeads(dim, spec.ensemble).to(dev) if spec.ensemble > 0 else None

    def set_ensemble(self, k: int) -> bool:
        """Give the model ``k`` fresh ensemble members (0: none) when it has another number
        (a world model saved without them, started from: ``trainer.wm_init_from``,
        ``trainer.init_from``); its spec says so from then on.  True if it changed.  Never on a
        resumed model (its optimizer state holds the parameters it had; the model-spec check
        refuses such a resume, ``models.checkpoints.spec``)."""
        if k == self.spec.ensemble:
            return False
        dev = self.page_head.weight.device
        self.spec = dataclasses.replace(self.spec, ensemble=int(k))
        self.ensemble = EnsembleHeads(self.page_head.in_features, k).to(dev) if k > 0 else None
        self.state.ensemble_trained = False
        return True

    def parts(self) -> dict[str, torch.nn.Module | None]:
        """The modules saved in ``parts.safetensors``."""
        return {
            "match": self.match,
            "page_head": self.page_head,
            "reward_head": self.reward_head,
            "done_head": self.done_head,
            "change_head": self.change_head,
            "lines": self.lines,
            "ensemble": self.ensemble,
        }

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        match_flags: torch.Tensor | None = None,
        lm_head: bool = True,
        heads: HeadPlaces | None = None,
        pool: torch.Tensor | None = None,
        page_rows: list[int] | None = None,
        logits_at: torch.Tensor | None = None,
        **kwargs: Any,
    ) -> WorldModelOutput:
        """One pass of the backbone (``LanguageModel.forward``: ``match_flags``, ``lm_head`` and
        the backbone's keyword arguments) and of the heads asked for: ``heads`` (where each row's
        heads read), ``pool`` (a (B, T) float mask of 0 and 1 to average the last layer over; ``page_rows``: the
        rows of that mean the page head embeds) and ``logits_at`` (a (B, T) boolean mask: the
        LM head on those positions only, after a backbone-only pass, so a loss's logits are
        bounded by its target tokens).  See ``WorldModelOutput``."""
        want = heads is not None or pool is not None or logits_at is not None
        if want and lm_head:
            kwargs["output_hidden_states"] = True
        out = super().forward(input_ids, match_flags=match_flags, lm_head=lm_head, **kwargs)
        states = getattr(out, "hidden_states", None)
        hidden = getattr(out, "last_hidden_state", None)
        if hidden is None and states:
            hidden = states[-1]
        res = WorldModelOutput(
            logits=getattr(out, "logits", None),
            hidden=hidden,
            hidden_states=states,
            past_key_values=getattr(out, "past_key_values", None),
        )
        if heads is not None:
            res.head_input = self.head_input(gather_rows(hidden), heads)
            res.reward_logits, res.done_logits, res.change_logits = self.head_logits(res.head_input)
            if self.ensemble is not None:
                res.ensemble_logits = self.ensemble(res.head_input)
        if pool is not None:
            res.pooled = (hidden * pool[..., None]).sum(1) / pool.sum(1, keepdim=True).clamp(
                min=1.0
            )
            if page_rows is not None:
                res.page_embedding = self.embed_page(res.pooled[page_rows])
        if logits_at is not None:
            res.logits = self.logits_at(hidden[logits_at])
        return res

    def head_places(self, tokenizer: Tokenizer, prompts: list[list[int]]) -> HeadPlaces:
        """Where the heads read each of ``prompts`` (world-model prompt ids): ``head_positions``
        and, with the named lines' layer, each prompt's ``RowLines``."""
        return HeadPlaces(
            [head_positions(tokenizer, p) for p in prompts], line_positions(self.lines, prompts)
        )

    def head_input(self, gather: Gather, places: HeadPlaces) -> torch.Tensor:
        """(B, d): row b's mean of the last layer's states at ``places.positions[b]`` (read by
        ``gather``), plus the named lines' layer on ``places.lines`` when given."""
        mean = torch.stack([gather(b, pos).mean(0) for b, pos in enumerate(places.positions)])
        if places.lines is None or self.lines is None:
            return mean
        return mean + self.lines(gather, places.lines, mean)

    def head_logits(
        self, head_input: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(reward, done, change) logits of the heads on ``head_input`` (B, d)."""
        r, d, c = self.reward_head, self.done_head, self.change_head
        return (
            r(head_input.to(r.weight.dtype)),
            d(head_input.to(d.weight.dtype)),
            c(head_input.to(c.weight.dtype)),
        )

    def head_probs(self, head_input: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(p(success), p(done)) per row of ``head_input`` (B, d)."""
        reward, done, _ = self.head_logits(head_input)
        return torch.softmax(reward.float(), -1)[:, 1], torch.softmax(done.float(), -1)[:, 1]

    def ensemble_probs(self, head_input: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
        """(p(success), p(done)) of every ensemble member, each (K, B); None without a trained
        ensemble."""
        if self.ensemble is None or not self.ensemble_trained():
            return None
        reward, done = self.ensemble(head_input)
        return torch.softmax(reward.float(), -1)[..., 1], torch.softmax(done.float(), -1)[..., 1]

    def ensemble_trained(self) -> bool:
        """True once a world-model step trained the ensemble's members."""
        return self.ensemble is not None and self.state.ensemble_trained

    def embed_page(self, pooled: torch.Tensor) -> torch.Tensor:
        """The page head on pooled change states (n, d) -> (n, 384): the InfoNCE term's
        prediction of the next page's embedding (``models.lm.embedder``)."""
        return self.page_head(pooled)

    def heads_trained(self) -> bool:
        """True once the reward/done heads were trained on ``HEAD_FEATURE`` (``predict`` then
        uses them; else the text)."""
        return self.state.heads_trained and self.state.head_feature == HEAD_FEATURE

    def change_head_trained(self) -> bool:
        return self.state.change_head_trained

    def mark_heads_trained(self, change_head: bool = False) -> None:
        """A training step trained the reward/done heads on ``HEAD_FEATURE`` (and, with
        ``change_head``, the change head): the trainer calls it after the step."""
        self.state.heads_trained = True
        self.state.head_feature = HEAD_FEATURE
        if change_head:
            self.state.change_head_trained = True
        if self.ensemble is not None:
            self.state.ensemble_trained = True

    def saved_state(self) -> dict:
        return dataclasses.asdict(self.state)

    def restore_state(self, meta: dict, parts: dict[str, dict[str, torch.Tensor]]) -> None:
        """The saved flags, each off when the file lacks the weights of its heads (a legacy
        directory saved before them)."""
        st = meta.get("state", {})
        self.state = WorldModelState(
            heads_trained=bool(st.get("heads_trained")) and all(h in parts for h in HEADS),
            change_head_trained=bool(st.get("change_head_trained")) and "change_head" in parts,
            head_feature=st.get("head_feature"),
            ensemble_trained=bool(st.get("ensemble_trained")) and "ensemble" in parts,
        )

    def save_pretrained(self, path: str) -> None:
        """The whole model in ``path`` (``models.lm.saved.save_model``; the tokenizer is saved
        by its own ``save_pretrained``); ``models.lm.saved.load_model(WorldModel, path)`` reads
        it back."""
        save_model(self, path)
