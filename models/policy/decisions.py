"""The decisions a trajectory made, rebuilt as the policy saw them, and the rows they score.

A trajectory step is a *decision* (``Decision``, ``trajectory_decisions``): the ``models.lm.prompts``
policy prompt with history = the trajectory's previous action texts, C(s) from
``models.policy.candidates.policy_candidates`` (the function the runner acted with), the recorded
action's place in C(s) (found by its text, else by its canonical text; -1 if it is not a
candidate), the rebuilt set's ``candidates_hash`` beside the recorded one, and the temperature of
its ``log pi_T`` (the transition's ``info["temperature"]``, else the trainer's).
``prepare_decisions`` builds them for a whole batch ahead of its forward passes.

A micro-batch scores each distinct (prompt, continuation) row once (``Rows``: a group's shared
first page, the G rollouts' same candidates); ``plan_step`` adds a decision's rows and says how
its ``log pi_T`` reads them (``StepPlan``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch

from core.spaces import Observation, parse_action
from models.lm.prompts import action_ids, policy_prompt_ids
from models.lm.types import Tokenizer
from models.policy.candidates import MAX_CANDIDATES, candidates_hash, policy_candidates


def trajectory_rows(
    tokenizer: Tokenizer, steps: list, max_positions: int
) -> list[tuple[list[int], list[int]]]:
    """(policy prompt, action tokens) per step, history = the trajectory's previous action texts."""
    rows, history = [], []
    for t in steps:
        obs = Observation.from_dict(t.obs)
        rows.append(
            (
                policy_prompt_ids(tokenizer, obs, history, max_positions),
                action_ids(tokenizer, t.action),
            )
        )
        history = history + [t.action]
    return rows


@dataclass
class Decision:
    """One step as the policy saw it: the prompt, the rebuilt candidate set C(s), the action's place in it."""

    prompt: list[int]
    # token ids (text + eos) of every candidate, in ``policy_candidates`` order
    cand_ids: list[list[int]]
    index: int  # the recorded action's index in the candidates, -1 if it is not one of them
    action_ids: list[int]
    hash: str  # ``candidates_hash`` of the rebuilt set
    recorded_hash: str  # the transition's ``candidates_hash`` ("" = not recorded)
    # T of ``log pi_T``: the transition's ``info["temperature"]``, else the trainer's
    temperature: float


def _canonical(text: str) -> str:
    try:
        return parse_action(text).to_text()
    except Exception:  # noqa: BLE001 - an unparsable text simply matches no candidate
        return text


def trajectory_decisions(
    tokenizer: Tokenizer,
    steps: list,
    max_positions: int,
    default_temperature: float = 1.0,
    max_candidates: int = MAX_CANDIDATES,
) -> list[Decision]:
    """``Decision`` per step: prompt as in ``trajectory_rows``, C(s) from ``policy_candidates`` (the
    function the runner acts with)."""
    out = []
    for (prompt, a_ids), t in zip(
        trajectory_rows(tokenizer, steps, max_positions), steps, strict=True
    ):
        acts, ids = policy_candidates(
            tokenizer, Observation.from_dict(t.obs), prompt, max_positions, max_candidates
        )
        texts = [a.to_text() for a in acts]
        k = texts.index(t.action) if t.action in texts else -1
        if k < 0:
            c = _canonical(t.action)
            k = texts.index(c) if c in texts else -1
        temp = (t.info or {}).get("temperature")
        ok_t = isinstance(temp, int | float) and not isinstance(temp, bool) and temp > 0
        a_ids = a_ids[
            : max(1, max_positions - len(prompt))
        ]  # scored only when no candidate: keep it in range
        out.append(
            Decision(
                prompt,
                ids,
                k,
                a_ids,
                candidates_hash(texts),
                getattr(t, "candidates_hash", "") or "",
                float(temp) if ok_t else float(default_temperature),
            )
        )
    return out


def prepare_decisions(
    tokenizer: Tokenizer, trajectories: list, max_positions: int, default_temperature: float = 1.0
) -> dict[int, list[Decision]]:
    """Each trajectory's ``trajectory_decisions`` (candidates and tokens: the loss's CPU work before
    any forward) by ``id``, computed ahead: the trainer builds the next batch's while the current
    one trains (``Trainer.prepare``) and hands them to ``policy_batch_loss(prepared=...)``."""
    return {
        id(tr): trajectory_decisions(tokenizer, tr.steps(), max_positions, default_temperature)
        for tr in trajectories
    }


class Rows:
    """The distinct (prompt, continuation) rows of a micro-batch, by prompt: ``prompts[b]`` and its
    continuations ``conts[b]`` (``models.policy.log_pi.LogPi.batched``'s input); a row's id is
    ``(b, j)``, its prompt's index and its place among that prompt's continuations."""

    def __init__(self) -> None:
        self.prompts: list[list[int]] = []
        self.conts: list[list[list[int]]] = []
        self._prompt: dict[tuple, int] = {}
        self._row: dict[tuple, tuple[int, int]] = {}

    def __len__(self) -> int:
        return len(self._row)

    def add(self, prompt: list[int], cont: list[int]) -> tuple[int, int]:
        """The id of the row (``prompt``, ``cont``), added if new."""
        key = (tuple(prompt), tuple(cont))
        if key not in self._row:
            b = self._prompt.get(key[0])
            if b is None:
                b = self._prompt[key[0]] = len(self.prompts)
                self.prompts.append(prompt)
                self.conts.append([])
            self._row[key] = (b, len(self.conts[b]))
            self.conts[b].append(cont)
        return self._row[key]


class StepPlan(NamedTuple):
    """How one decision's ``log pi_T(a|s)`` reads the scored rows."""

    ids: list[tuple[int, int]]  # the row of each candidate (and of a GSPO action added to them)
    index: int  # the action's place in ``ids``; -1: an expert action outside C(s)
    fallback: tuple[int, int] | None  # that expert action's own row (its mean token log-prob)
    temperature: float  # the T of ``log pi_T``


def plan_step(rows: Rows, d: Decision, gspo: bool, cnt: dict) -> StepPlan:
    """The rows one decision scores (added to ``rows``) and how its ``log pi_T`` reads them; a
    GSPO action missing from the rebuilt set is scored along with it, an expert one by its own
    row.  Counts into ``cnt`` (``policy_batch_loss``'s report)."""
    ids = [rows.add(d.prompt, c) for c in d.cand_ids]
    k, fb = d.index, None
    cnt["decisions"] += 1
    cnt["cand_total"] += len(ids)
    if gspo:
        if not d.recorded_hash:
            cnt["cand_unhashed"] += 1
        elif d.recorded_hash != d.hash:
            cnt["cand_mismatch"] += 1
        if k < 0:  # the set changed under the sample: score the action along with it
            cnt["cand_missing"] += 1
            ids.append(rows.add(d.prompt, d.action_ids))
            k = len(ids) - 1
    elif k < 0:
        cnt["bc_not_candidate"] += 1
        fb = rows.add(d.prompt, d.action_ids)
    return StepPlan(ids, k, fb, d.temperature)


def pad_decisions(parts: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-trajectory log-probs (one per decision) -> (N, T) padded + mask."""
    T = max(int(p.shape[0]) for p in parts)
    mask = torch.zeros(len(parts), T, device=parts[0].device)
    rows = [torch.cat([p, p.new_zeros(T - p.shape[0])]) for p in parts]
    lp = torch.stack(rows)
    for i, p in enumerate(parts):
        mask[i, : p.shape[0]] = 1.0
    return lp, mask
