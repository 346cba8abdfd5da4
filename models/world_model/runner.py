"""The web world model at work: (instruction, page, action) -> the predicted next page, reward
and done (``WorldModelRunner.predict``).

Architecture: a decoder-only causal LM (GPT-Neo from ``ModelConfig`` by default, or any local
HF causal-LM directory via ``ModelConfig.world_model_path``) with its heads
(``models.world_model.model.WorldModel``).  Why decoder-only rather than an encoder-decoder:
the input (page) and the output (change) share one vocabulary and one format, so a single stack
with a KV cache is the cheapest to train and to sample (per the stack notes GPT-Neo trains about
2-4x faster per step than T5/BART of the same size on CPU), the same code path serves the
policy, and any pretrained causal LM a user plugs in works unchanged.

The model writes ``models.world_model.change.format_output(...)`` text after the prompt of
``models.lm.prompts.world_model_prompt_ids``: a ``why:`` line, the edit script, then ``reward``
and ``done`` (``models.world_model.outputs``).  The runner parses it (repairing or rejecting, see
``models.world_model.change.parse_model_output``) and *applies* it to the current page, so the
predicted next page is exactly checkable against the real one.

**Reward and done heads** (``WorldModel.head_probs``): two linear classifiers (d_model -> 2) on
the heads' input (``WorldModel.head_input``: the mean of the last layer's hidden states over the
line of the element the action names and the prompt's ``Action: ...`` tail,
``models.world_model.heads.head_positions``, plus the named lines' layer,
``models.world_model.lines``).  ``reward_head``: task success (raw reward > 0,
``models.losses.task_success_reward``, the reward RL trains on) vs not; ``done_head``: done vs
not; trained with the change text by ``models.world_model.loss.world_model_batch_loss``.
``predict`` takes reward (1.0 if p(success) > 0.5 else 0.0) and done (p(done) > 0.5) from the
heads once they are trained (``WorldModel.heads_trained``), whatever the text's ``reward``/``done``
lines say (those stay on ``Prediction.text_reward``/``text_done``); the heads' input comes from
the prefill passes of ``generate_texts`` (no extra forward).  Until then (a fresh model, a
checkpoint written before any world-model step, heads trained on another input than
``HEAD_FEATURE``) reward and done come from the text.

**The ensemble** (``models.world_model.ensemble``, ``model.world_model_ensemble``): with trained
members, every prediction also carries the members' mean p(success) and its standard deviation
(``Prediction.ensemble_mean``, ``disagreement``), and the reward is pessimistic: 1.0 only when
p(success) > 0.5 and the members' ``mean - dream.pessimism x std`` > 0.5
(``pessimistic_success``).

The exact-match input feature and the named lines' layer are parts of the model
(``WorldModelSpec.match_feature``, ``head_lines``: on with ``model.instruction_match``;
``models.lm.match``, ``models.world_model.lines``): the heads then read "the clicked link is the
asked one", "the typed value is the asked text" off the acted element's line instead of matching
strings across the prompt by attention (terminal reward balanced accuracy 0.935 / 0.943 over two
seeds against 0.847 / 0.836 without the feature; choose-list 0.96-1.00 with the lines' layer,
0.54-0.65 without; docs/results/world-model/README.md).

Decoding (``DreamConfig.wm_decode``, read by ``WorldModelRunner``): ``greedy`` (the generated
text), ``rerank`` (the generated text and the proposals of
``models.world_model.outputs.candidate_outputs`` scored by the model, the most likely kept;
always parses) or ``head`` (the change head picks the kind of proposal,
``models.world_model.proposals``; its ``other`` keeps the generated text).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from core.config import DreamConfig
from core.spaces import Action, Observation
from models.lm.prompts import world_model_prompt_ids
from models.lm.scoring import score_continuations
from models.lm.tokenizer import decode, encode, eos_id, pad_id
from models.lm.types import Tokenizer
from models.world_model.change import (
    apply_change,
    diff_to_change,
    format_output,
    parse_model_output,
)
from models.world_model.decoding import generate_tokens
from models.world_model.ensemble import ensemble_stats, pessimistic_success
from models.world_model.heads import try_parse_action
from models.world_model.model import WorldModel
from models.world_model.outputs import Prediction, candidate_outputs, next_observation
from models.world_model.proposals import choose

DECODES = ("greedy", "rerank", "head")


def _distinct(prompts: list[list[int]]) -> tuple[list[list[int]], list[int]]:
    """(the distinct prompts in first-seen order, each prompt's index among them): deterministic
    work on identical inputs is done once."""
    where: dict[tuple, int] = {}
    idx = [where.setdefault(tuple(p), len(where)) for p in prompts]
    return [list(u) for u in where], idx


class WorldModelRunner:
    """Batched prediction with KV-cached generation (left padded)."""

    def __init__(
        self,
        model: WorldModel,
        tokenizer: Tokenizer,
        dream: DreamConfig | None = None,
        max_positions: int | None = None,
        max_change_tokens: int | None = None,
        world_model_version: int = 0,
    ):
        """``dream``: ``wm_decode`` and ``max_change_tokens`` (None: ``DreamConfig``'s defaults);
        ``max_positions``: the prompts' budget (the run's ``model.max_positions``; None: the
        model's own position table)."""
        dream = dream if dream is not None else DreamConfig()
        self.model = model
        self.tokenizer = tokenizer
        own = model.max_positions
        want = int(max_positions or own)
        # never past the model's own position table (a world model trained offline with fewer
        # positions than the run's model.max_positions: trainer.wm_init_from)
        self.max_positions = min(want, own) if own > 0 else want
        self.max_change_tokens = int(max_change_tokens or dream.max_change_tokens)
        self.world_model_version = world_model_version
        self.pessimism = float(dream.pessimism)  # the ensemble's lower bound on a success
        # "greedy": the generated text; "rerank": the generated text and the proposals of
        # ``candidate_outputs`` scored by the model (summed log-prob of text + eos), the most likely kept.
        # From ``DreamConfig.wm_decode``; settable afterwards.
        self.decode = str(dream.wm_decode or "greedy")
        if self.decode not in DECODES:
            raise ValueError(f"dream.wm_decode must be one of {DECODES}, got {self.decode!r}")

    def prompt_ids(self, obs: Observation, action_text: str) -> list[int]:
        return world_model_prompt_ids(
            self.tokenizer, obs, action_text, self.max_positions, self.max_change_tokens
        )

    @torch.no_grad()
    def generate_texts(
        self,
        prompts: list[list[int]],
        sample: bool = False,
        temperature: float = 1.0,
        return_hidden: bool = False,
        abort: Callable[[], bool] | None = None,
    ) -> list[str] | tuple[list[str], torch.Tensor]:
        """Greedy (or sampled, top_k = 0) continuation of each prompt up to eos.

        ``return_hidden``: also the input of the reward/done heads, (B, d): each row's mean of the
        last layer's hidden states at ``head_positions`` of its prompt, read from the prefill's passes
        (``output_hidden_states`` on them, no extra forward; positions inside a shared prefix from the
        prefix pass, the others from the row's tail pass).

        Decoding: ``models.world_model.decoding.generate_tokens`` (preallocated KV cache, shared prefixes
        prefilled once, finished rows dropped); same model, same argmax as ``model.generate``.
        ``abort``: asked every few tokens; ``core.waiting.Aborted`` when it says so.
        """
        self.model.eval()
        eos = eos_id(self.tokenizer)
        new = max(1, min(self.max_change_tokens, self.max_positions - max(len(p) for p in prompts)))
        gen, last_hidden = self._tokens(prompts, new, sample, temperature, return_hidden, abort)
        texts = [decode(self.tokenizer, self._until_eos(row, eos)) for row in gen]
        return (texts, last_hidden) if return_hidden else texts

    def _tokens(
        self,
        prompts: list[list[int]],
        new: int,
        sample: bool,
        temperature: float,
        return_hidden: bool,
        abort: Callable[[], bool] | None,
        ignore_eos: bool = False,
    ) -> tuple[list[list[int]], torch.Tensor | None]:
        """``generate_tokens`` on ``prompts``: up to ``new`` tokens per row (to eos, unless
        ``ignore_eos``), and the heads' input when ``return_hidden``."""
        return generate_tokens(
            self.model,
            prompts,
            new,
            pad_id(self.tokenizer),
            eos_id(self.tokenizer),
            self.max_positions,
            sample=sample,
            temperature=temperature,
            return_hidden=return_hidden,
            ignore_eos=ignore_eos,
            heads=self.model.head_places(self.tokenizer, prompts) if return_hidden else None,
            abort=abort,
        )

    @staticmethod
    def _until_eos(row: list[int], eos: int) -> list[int]:
        return row[: row.index(eos)] if eos in row else row

    def predict(
        self,
        obs_list: list[Observation],
        actions: list,
        sample: bool = False,
        temperature: float = 1.0,
        abort: Callable[[], bool] | None = None,
    ) -> list[Prediction]:
        """Predicted next observation, reward, done per (obs, action); rejected output -> page unchanged.
        ``abort``: see ``generate_texts`` (``core.waiting.Aborted`` when it says so).

        Reward and done come from the reward/done heads when they are trained (``heads_trained``):
        reward 1.0 if p(success) > 0.5 else 0.0 (with a trained ensemble: only when its pessimistic
        bound agrees, ``pessimistic_success``), done if p(done) > 0.5, whatever the text says or
        whether it parses; otherwise from the text's lines (rejected text: reward 0, not done)."""
        assert len(obs_list) == len(actions), (len(obs_list), len(actions))
        if not obs_list:
            return []
        acts = [a if isinstance(a, Action) else try_parse_action(str(a)) for a in actions]
        texts_in = [a.to_text() if isinstance(a, Action) else str(a) for a in actions]
        prompts = [self.prompt_ids(o, a) for o, a in zip(obs_list, texts_in, strict=True)]
        use_heads = self.model.heads_trained()
        head = self.decode == "head" and use_heads and self.model.change_head_trained()
        if head:
            outs, hidden = self._head_outputs(obs_list, acts, prompts, sample, temperature, abort)
        else:
            outs, hidden = self._generate(prompts, sample, temperature, use_heads, abort)
        p_succ = p_done = ens = None
        if hidden is not None:
            with torch.no_grad():
                ps, pd = self.model.head_probs(hidden)
                members = self.model.ensemble_probs(hidden)
            p_succ, p_done = ps.cpu().tolist(), pd.cpu().tolist()
            ens = None if members is None else ensemble_stats(members[0].cpu())
        if self.decode == "rerank":
            outs = self.rerank(obs_list, acts, prompts, outs)
        preds = []
        for b, (obs, act, text) in enumerate(zip(obs_list, acts, outs, strict=True)):
            change, reward, done, ok, reason = parse_model_output(
                text, tree=obs.tree, next_id=obs.next_id
            )
            tree = obs.tree
            if ok:
                try:
                    tree = apply_change(obs.tree, change, next_id=obs.next_id)
                except Exception as e:  # noqa: BLE001 - parse validated it; be safe anyway
                    ok, reason, reward, done = False, f"apply failed: {e}", 0.0, False
            text_reward, text_done = float(reward), bool(done)
            mean = std = None
            if p_succ is not None and p_done is not None:
                reward, done = (1.0 if p_succ[b] > 0.5 else 0.0), p_done[b] > 0.5
                if ens is not None:
                    mean, std = ens[0][b], ens[1][b]
                    reward = float(pessimistic_success(p_succ[b], mean, std, self.pessimism))
            preds.append(
                Prediction(
                    next_observation(obs, tree, act),
                    float(reward),
                    bool(done),
                    ok,
                    reason,
                    text,
                    obs.tree,
                    text_reward,
                    text_done,
                    None if p_succ is None else p_succ[b],
                    None if p_done is None else p_done[b],
                    mean,
                    std,
                )
            )
        return preds

    def _generate(
        self,
        prompts: list,
        sample: bool,
        temperature: float,
        want_hidden: bool,
        abort: Callable[[], bool] | None,
    ) -> tuple[list[str], torch.Tensor | None]:
        """(texts, the heads' input or None) of every prompt; greedy generates identical prompts once."""
        if sample:
            res = self.generate_texts(
                prompts,
                sample=True,
                temperature=temperature,
                return_hidden=want_hidden,
                abort=abort,
            )
            return res if want_hidden else (res, None)
        uniq, idx = _distinct(prompts)
        res = self.generate_texts(uniq, return_hidden=want_hidden, abort=abort)
        texts_u, hid_u = res if want_hidden else (res, None)
        hidden = None if hid_u is None else hid_u[torch.tensor(idx, device=hid_u.device)]
        return [texts_u[i] for i in idx], hidden

    def _head_outputs(
        self,
        obs_list: list,
        acts: list,
        prompts: list,
        sample: bool,
        temperature: float,
        abort: Callable[[], bool] | None,
    ) -> tuple[list[str], torch.Tensor]:
        """``decode="head"``: the heads' input from one forward pass over the distinct prompts, the
        change head's pick per row, and text generated only for the rows it leaves to the text
        (``other``): no token is decoded for a row whose page a proposal gives."""
        uniq, idx = _distinct(prompts)
        hid_u = self.prefill_head_input(uniq)
        hidden = hid_u[torch.tensor(idx, device=hid_u.device)]
        picks = self._choose(hidden, obs_list, acts)
        need = [b for b, pick in enumerate(picks) if pick is None]
        texts = (
            self._generate([prompts[b] for b in need], sample, temperature, False, abort)[0]
            if need
            else []
        )
        got = dict(zip(need, texts, strict=True))
        texts_all = [got.get(b, "") for b in range(len(picks))]
        return self._picked(obs_list, acts, hidden, texts_all, picks), hidden

    def _choose(self, hidden: torch.Tensor, obs_list: list, acts: list) -> list[str | None]:
        """Per row, the page of the change head's pick on the heads' input ``hidden``, or None
        for ``other`` (``models.world_model.proposals.choose``)."""
        with torch.no_grad():
            logits = self.model.head_logits(hidden)[2].float()
        return choose(logits, obs_list, acts)

    def _picked(
        self,
        obs_list: list,
        acts: list,
        hidden: torch.Tensor,
        texts: list[str],
        picks: list | None = None,
    ) -> list[str]:
        """Per row: the change head's proposal as an edit script, or the row's text on ``other``."""
        picks = self._choose(hidden, obs_list, acts) if picks is None else picks
        return [
            texts[b]
            if pick is None
            else format_output(diff_to_change(o.tree, pick, next_id=o.next_id), 0.0, False)
            for b, (o, pick) in enumerate(zip(obs_list, picks, strict=True))
        ]

    @torch.no_grad()
    def prefill_head_input(self, prompts: list[list[int]], chunk: int = 16) -> torch.Tensor:
        """The heads' input (B, d) of each prompt (``WorldModel.head_input`` at its
        ``head_places``, on the last layer after the final norm, as the prefill of
        ``generate_texts`` reads it) from a forward pass of the transformer alone (no
        language-model head, no decoding)."""
        self.model.eval()
        dev = next(self.model.parameters()).device
        pad, out = pad_id(self.tokenizer), []
        for i in range(0, len(prompts), chunk):
            part = prompts[i : i + chunk]
            T = max(len(p) for p in part)
            ids = torch.full((len(part), T), pad, dtype=torch.long, device=dev)
            att = torch.zeros((len(part), T), dtype=torch.long, device=dev)
            for r, p in enumerate(part):
                ids[r, : len(p)] = torch.tensor(p, device=dev)
                att[r, : len(p)] = 1
            places = self.model.head_places(self.tokenizer, part)
            out.append(self.model(ids, attention_mask=att, lm_head=False, heads=places).head_input)
        return torch.cat(out)

    @torch.no_grad()
    def rerank(
        self,
        obs_list: list[Observation],
        acts: list,
        prompts: list[list[int]],
        generated: list[str],
    ) -> list[str]:
        """Per row, the most likely of ``candidate_outputs`` (the generated text is one of them)."""
        eos = eos_id(self.tokenizer)
        cands = [
            candidate_outputs(o, a, g) for o, a, g in zip(obs_list, acts, generated, strict=True)
        ]
        room = [max(1, self.max_positions - len(p)) for p in prompts]
        conts = [
            [(encode(self.tokenizer, c) + [eos])[: room[b]] for c in cs]
            for b, cs in enumerate(cands)
        ]
        scores = score_continuations(
            self.model, prompts, conts, self.max_positions, pad_id(self.tokenizer)
        )
        return [cs[int(torch.argmax(sc))] for cs, sc in zip(cands, scores, strict=True)]
