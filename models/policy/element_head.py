"""The policy's element head (``ModelConfig.policy_pointer`` turns it on; on by default, off in the frozen study).

What it is: a term added to the score of every candidate action that names a page element,

    score(s, a) = sum of a's token log-probs given the prompt
                  + w . max_{t in line(k)} h_t  +  g u . [line(k) holds a word of the instruction],

where ``k`` is the element ``a`` names (``click(4)``, ``type(3, "x")``: 4, 3), ``line(k)`` the
tokens of the page line that starts with ``[k]``, ``h_t`` the last layer's hidden state of prompt
token ``t`` (after the final layer norm), ``w`` a learned vector and ``u`` a learned weight
(``policy.element_head.proj`` and ``.named``, zero at init, so a new head changes nothing until
trained); the bracket is ``models.lm.match``'s exact-match rule (a whole word, case-sensitive, also
a word of the instruction line) applied to the line, and ``g`` a fixed gain (``NAMED_GAIN``, below).  Actions that name no element, or
an element the page does not show, get 0.  ``pi_T(a|s)`` is then the softmax of score/T over
C(s), as before; acting and the learner add the same term (``models.policy.log_pi``, the one
definition of ``log pi_T``), so the probability trained is the probability sampled.

Why: choosing the element whose label is the asked word means, for the language-model score alone,
predicting the element's number, which the page writes *before* its label, from the action line:
a two-hop copy across the prompt.  A 2-layer policy did not learn it from 40 demonstrations, nor
from 800 (behaviour cloning on 200 expert episodes per task, 1,000 steps: click-link 25 %, 47 %
with the exact-match feature; docs/results/policy-pointer/README.md).  The element head reads each element's own line
instead, as element-ranking web agents score each candidate element's representation; with the
exact-match feature (``policy_match_feature``) a flagged word on the line is one linear read-out
away.  The maximum, not the mean, because the label is a few tokens of the line (as the world
model's acted line, ``models/world_model/lines.py``).

Where the hidden states come from: acting reads them from the passes that score the candidates
(``models.lm.scoring.score_continuations(states=...)``: the shared prefix's pass and the prompt
tails' trie nodes); the learner reads them from the forward it already runs, whose packed rows
start with the prompt seen causally (``models.lm.scoring.continuation_logprobs(hidden=...)``).  A
prompt token sees only earlier prompt tokens in both, so the states are the same.
"""

from __future__ import annotations

import torch

from models.lm.base import LanguageModel
from models.lm.match import (
    POLICY_END,
    acted_element,
    element_line_index,
    line_spans,
)

# ``u``'s gain: under Adam a parameter moves about lr per step (3e-4 here) whatever its gradient, so a
# fresh scalar read-out would need thousands of steps to move a score by a few units; the gain makes
# the term ``NAMED_GAIN * u * [named]``, the same as a NAMED_GAIN-times larger learning rate for ``u``
NAMED_GAIN = 200.0


def element_lines(ids: list[int], pieces: list[str]) -> dict[str, tuple[bool, list[int]]]:
    """Element id -> (does its page line hold a word of the instruction (``models.lm.match``'s exact
    match rule), the positions of the line's prompt tokens): the first page line
    (``wm_match.line_spans``, ``wm_match.element_line_index``) that starts (after blanks) with
    ``[k]``, as the world model's acted line.  Empty for a row that is not a prompt."""
    text, spans = line_spans(ids, pieces, POLICY_END)
    return {k: spans[n][2:] for k, n in element_line_index(text, spans).items()}


class ElementHead(torch.nn.Module):
    """``proj``: the vector ``w`` (a bias-free linear layer); ``named``: the weight ``u`` of "the line
    holds a word of the instruction" (the hand-written instruction-match bit; None when
    ``use_named`` is off: the head then reads the line's states only); both zero at init.
    ``pieces``: each token id's text."""

    def __init__(self, dim: int, pieces: list[str], use_named: bool = True) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(dim, 1, bias=False)
        torch.nn.init.zeros_(self.proj.weight)
        self.named = torch.nn.Parameter(torch.zeros(1)) if use_named else None
        self.pieces = pieces

    def terms(self, hidden: torch.Tensor, prompt: list[int], actions: list[str]) -> torch.Tensor:
        """(len(actions),) the element head's term of each action after ``prompt`` (``hidden``: its
        last-layer states, (len(prompt), d))."""
        lines = element_lines(prompt, self.pieces)
        rows, named, which = [], [], []
        for n, a in enumerate(actions):
            line = lines.get(acted_element(a) or "")
            if line and line[1]:
                rows.append(hidden[torch.tensor(line[1], device=hidden.device)].max(0).values)
                named.append(float(line[0]))
                which.append(n)
        out = hidden.new_zeros(len(actions))
        if rows:
            vals = self.proj(torch.stack(rows)).squeeze(-1)
            if self.named is not None:
                flag = torch.tensor(named, dtype=vals.dtype, device=vals.device)
                vals = vals + NAMED_GAIN * self.named * flag
            out = out.index_put((torch.tensor(which, device=hidden.device),), vals)
        return out


@torch.no_grad()
def prompt_states(model: LanguageModel, prompts: list[list[int]]) -> list[torch.Tensor]:
    """The last layer's hidden states of each prompt's tokens, (len(prompt), d): one plain forward of
    the prompts, right-padded (a causal prompt token never sees the padding after it).  The
    reference the scoring passes' states are checked against; ``element_scores`` without them."""
    dev = next(model.parameters()).device
    width = max(len(p) for p in prompts)
    ids = torch.zeros(len(prompts), width, dtype=torch.long)
    for r, p in enumerate(prompts):
        ids[r, : len(p)] = torch.tensor(p)
    out = model(input_ids=ids.to(dev), output_hidden_states=True, use_cache=False)
    h = out.hidden_states[-1]
    return [h[r, : len(p)] for r, p in enumerate(prompts)]


def element_scores(
    model: LanguageModel,
    head: ElementHead | None,
    prompts: list[list[int]],
    actions: list[list[str]],
    states: list[torch.Tensor] | None = None,
) -> list[torch.Tensor] | None:
    """Per prompt, the element head's term of each of its candidate actions (no grad: acting's);
    None for a policy without the element head.  ``states``: the prompts' last-layer states, as
    ``models.lm.scoring.score_continuations`` reads them from its own passes; without them, one
    forward over the prompts (``prompt_states``)."""
    if head is None or not prompts:
        return None
    with torch.no_grad():
        if states is None:
            states = prompt_states(model, prompts)
        return [
            head.terms(h, p, a).float().cpu()
            for h, p, a in zip(states, prompts, actions, strict=True)
        ]
