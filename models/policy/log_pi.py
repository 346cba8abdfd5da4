"""``log pi_T(a|s)``, the policy's probability of an action: one definition, two modes.

The policy is a distribution over the page's candidate actions C(s) (``models.policy.candidates``):

    score(c)      = sum_j log p_LM(c_j | prompt, c_<j)  +  element(c)     (c: action text + eos)
    log pi_T(a|s) = log_softmax_{c in C(s)}(score(c) / T)[a]               (``candidate_logprobs``)

``element(c)`` is the element head's term (``models.policy.element_head.ElementHead.terms``, read
from the prompt's last-layer states and the element ``c``'s text names; 0 for a policy without the
head) and T the temperature the action was sampled at (``record_temperature``: 1 for argmax).
``LogPi`` computes the scores of prompts' continuations in one of two modes, the same numbers up
to float rounding, and the same element term, read from the same token texts (``LogPi.texts``):

* ``LogPi.cached`` (acting, ``models.policy.runner``): no grad; token log-probs and prompt states
  from ``models.lm.scoring.score_continuations`` (shared prefixes in a KV cache, token tries);
* ``LogPi.batched`` (the loss, ``models.policy.loss``): with grad, in eval mode (dropout off, as
  when acting); token log-probs and prompt states from
  ``models.lm.scoring.continuation_logprobs`` (packed rows, token tries), which also returns each
  continuation's token log-probs (behaviour cloning scores an expert action outside C(s) by
  their mean).

So the learner's recomputation of ``log pi_T`` with the unchanged model gives the number acting
recorded.
"""

from __future__ import annotations

import torch

from models.lm.scoring import continuation_logprobs, score_continuations
from models.policy.element_head import element_scores
from models.policy.model import Policy


def record_temperature(temperature: float) -> float:
    """The T of the recorded ``log pi_T``: the sampling temperature, or 1 for argmax (T <= 0)."""
    return float(temperature) if temperature > 0 else 1.0


def candidate_logprobs(scores: torch.Tensor, temperature: float) -> torch.Tensor:
    """``log pi_T`` over one candidate set: ``log_softmax(scores / T)`` (T <= 0 -> T = 1)."""
    return torch.log_softmax(scores.float() / record_temperature(temperature), -1)


class LogPi:
    """The scores (module doc) of ``model``'s continuations after prompts, in either mode.

    ``pad``: the tokenizer's padding id (``models.lm.tokenizer.pad_id``); ``max_positions``: the
    cached mode's room per pass (``ModelConfig.max_positions``).  The model is read at each call:
    a caller may swap its parts between calls."""

    def __init__(self, model: Policy, pad: int, max_positions: int) -> None:
        self.model = model
        self.pad = pad
        self.max_positions = max_positions

    def texts(self, conts: list[list[int]]) -> list[str]:
        """The text of each continuation the element head reads the named element from: its
        tokens' pieces joined (the head's ``pieces``; ids outside them read as nothing)."""
        pieces = self.model.element_head.pieces if self.model.element_head is not None else []
        return ["".join(pieces[t] for t in c if 0 <= t < len(pieces)) for c in conts]

    def cached(
        self, prompts: list[list[int]], conts: list[list[list[int]]], stats: dict | None = None
    ) -> list[torch.Tensor]:
        """Acting's mode: per prompt, the scores ``(len(conts[b]),)`` of its continuations (no grad,
        on the CPU).  ``stats["tokens"]`` (if given) counts the tokens run through the model."""
        head = self.model.element_head
        states: list | None = [None] * len(prompts) if head is not None else None
        scores = score_continuations(
            self.model, prompts, conts, self.max_positions, self.pad, stats=stats, states=states
        )
        if head is None:
            return scores
        terms = element_scores(
            self.model, head, prompts, [self.texts(c) for c in conts], states=states
        )
        if terms is None:
            return scores
        return [s + t for s, t in zip(scores, terms, strict=True)]

    def batched(
        self, prompts: list[list[int]], conts: list[list[list[int]]], rows_per_forward: int = 16
    ) -> tuple[list[list[torch.Tensor]], list[list[torch.Tensor]]]:
        """The loss's mode: per prompt, per continuation, (its score (0-d), its token log-probs),
        with grad.  The prompts are distinct; every (prompt, continuation) row is scored once."""
        rows = [(p, c) for p, cs in zip(prompts, conts, strict=True) for c in cs]
        head = self.model.element_head
        hidden: dict[int, torch.Tensor] | None = {} if head is not None else None
        lps = continuation_logprobs(self.model, rows, self.pad, rows_per_forward, hidden)
        seq = [lp.sum() for lp in lps]
        if head is not None and hidden is not None:  # the element head's term, as acting adds it
            terms: list[torch.Tensor] = []
            at = 0
            for p, cs in zip(prompts, conts, strict=True):
                vals = head.terms(hidden[at], list(p), self.texts(cs))
                terms += [vals[n] for n in range(len(cs))]
                at += len(cs)
            seq = [a + b for a, b in zip(seq, terms, strict=True)]
        scores, tokens, at = [], [], 0
        for cs in conts:
            scores.append(seq[at : at + len(cs)])
            tokens.append(lps[at : at + len(cs)])
            at += len(cs)
        return scores, tokens
