"""Trajectories -> the policy's loss (model forward passes only; no Kafka, S3 or DeepSpeed here).

``policy_batch_loss`` trains the policy's own distribution, ``pi_T(a|s)`` =
softmax over the page's candidate actions C(s) of score/T (``models.policy.candidates``).
Every trajectory step is rebuilt as the runner saw it (``trajectory_decisions``):
the ``models.lm.prompts`` policy prompt with history = the trajectory's previous
action texts, and C(s) from ``models.policy.candidates.policy_candidates`` -- the function
the runner acted with.  Every candidate (text + eos) is scored with grad
(``action_logprobs``; all candidates of a step share its prompt, so they are
packed into one forward row as a token trie, and identical rows -- a group's
first page -- are scored once; a policy with the element pointer adds its term, read from
the prompt states of the same forward: ``models.policy.element_head.row_terms``), and
``log pi_T(a|s) = log_softmax(scores / T)[a]``, with T the
temperature recorded on the transition (``info["temperature"]``) or
``TrainerConfig.policy_temperature``.  A rebuilt set whose hash differs from the
transition's ``candidates_hash`` is counted (``cand_mismatch``) and trained with
the rebuilt set (an action missing from it is added: ``cand_missing``).  Per
trajectory the sequence is its *decisions*: GSPO's ratio is normalised by the
number of steps.

* on-policy / dream trajectories (every step has ``behaviour_logprob``): GSPO
  with group advantages (groups = ``group_id``, named once at the source: the
  collector or dream generator that ran the group; the learner never invents
  one; reward = task success of the trajectory's terminal raw reward,
  ``losses.task_success_reward``).  A trajectory without a group id is counted
  (``ungrouped``, per source) and used for nothing else;
* expert trajectories (``source == "expert"``): behaviour cloning of the same
  distribution, ``-log pi_T(a*|s)`` (cross-entropy over the candidates, mean over
  expert steps), weighted by ``TrainerConfig.bc_weight``; an expert action that is
  not a candidate is counted (``bc_not_candidate``) and trained by its mean token
  NLL instead;
* anything else (real steps without log-probs): skipped and counted.

The log-prob pass runs with ``model.eval()`` (dropout off, grads on), so it is
the same function that ``PolicyRunner`` recorded.  GSPO's loss is a mean of
per-trajectory terms and BC a mean over expert steps, so the batch can be processed
in trajectory chunks with ``backward=True`` (gradient accumulation; pass the
engine's backward as ``backward_fn``) without changing the gradient.  Per micro-batch the
steps are: plan the candidate rows (``_plan_chunk``), score them (``_decision_logprobs``), then
the GSPO term (``_gspo_term``) and the BC term (``_bc_term``); ``_policy_metrics`` assembles the
report.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any

import torch

from core.config import ModelConfig, TrainerConfig
from core.spaces import Observation, parse_action
from models.lm.prompts import action_ids, policy_prompt_ids
from models.lm.tokenizer import pad_id
from models.lm.types import Tokenizer
from models.losses import (
    bc_loss,
    group_advantages,
    gspo_loss,
    source_stats,
    task_success_reward,
    token_logprobs,
)
from models.policy.candidates import (
    MAX_CANDIDATES,
    candidate_logprobs,
    candidates_hash,
    policy_candidates,
)
from models.policy.element_head import row_terms
from models.policy.model import Policy


def _pack(
    rows: list[tuple[list[int], list[int]]], max_pos: int
) -> list[tuple[list[int], list[int]]]:
    """Rows sharing a prompt -> packed rows (prompt, [row indices]) within ``max_pos``."""
    groups: dict[tuple, list[int]] = {}
    for i, (p, _) in enumerate(rows):
        groups.setdefault(tuple(p), []).append(i)
    packed = []
    for p, idx in groups.items():
        cur, used = [], len(p)
        for i in idx:
            n = len(rows[i][1])
            if cur and used + n > max_pos:
                packed.append((list(p), cur))
                cur, used = [], len(p)
            cur.append(i)
            used += n
        packed.append((list(p), cur))
    return packed


def _trie_row(
    prompt: list[int], conts: list[list[int]]
) -> tuple[list[int], list[int], list[list[int]], list]:
    """One packed row: the prompt, then the continuations as a token trie.

    Returns (tokens, position ids, the visible positions of each trie node -- the prompt
    is seen causally --, per continuation the positions predicting each of its tokens).
    The node for prefix ``c[:j+1]`` carries ``c[j]`` at position id ``len(prompt) + j``
    and sees the prompt and its ancestors, so every distinct prefix (``click(1``,
    ``type(6, "``) is computed once, as in ``models.lm.backbone.score_continuations``.
    """
    L = len(prompt)
    nodes: dict[tuple, int] = {}
    toks, pos, chains, at = list(prompt), list(range(L)), [], []
    for c in conts:
        where = [L - 1]
        for j in range(len(c) - 1):
            key = tuple(c[: j + 1])
            if key not in nodes:
                nodes[key] = len(chains)
                chains.append((chains[nodes[key[:-1]]] if j else []) + [L + len(chains)])
                toks.append(c[j])
                pos.append(L + j)
            where.append(L + nodes[key])
        at.append(where)
    return toks, pos, chains, at


def action_logprobs(
    model: Policy,
    tokenizer: Tokenizer,
    rows: list[tuple[list[int], list[int]]],
    rows_per_forward: int = 16,
    hidden: dict[int, torch.Tensor] | None = None,
) -> list[torch.Tensor]:
    """Token log-probs of each row's continuation given its prompt (with grad).

    ``rows``: (prompt_ids, continuation_ids).  Rows with the same prompt (all the
    candidates of a step, the G rollouts of a group at their first step, repeated
    pages) share one forward row: the prompt, then their continuations as a token
    trie (``_trie_row``: shared prefixes computed once) with a 4D tree mask and
    position ids = prompt length + depth -- exactly what ``PolicyRunner`` scores.
    Packed rows are sorted by length and run ``rows_per_forward`` at a time (little
    padding).  Runs in eval mode (dropout off) and restores the previous mode.  ``hidden`` (a dict):
    filled with each row's prompt's last-layer states, (len(prompt), d), for the element pointer.
    """
    max_pos = int(getattr(model.config, "max_position_embeddings", 1 << 30))
    packed = sorted(
        _pack(rows, max_pos), key=lambda x: len(x[0]) + sum(len(rows[i][1]) for i in x[1])
    )
    out: list[torch.Tensor | None] = [None] * len(rows)
    dev = next(model.parameters()).device
    neg = torch.finfo(torch.float32).min
    was_training = model.training
    model.eval()
    try:
        for c0 in range(0, len(packed), rows_per_forward):
            chunk = packed[c0 : c0 + rows_per_forward]
            built = [_trie_row(p, [rows[i][1] for i in idx]) for p, idx in chunk]
            T = max(len(b[0]) for b in built)
            ids = torch.full((len(built), T), pad_id(tokenizer), dtype=torch.long)
            pos_t = torch.zeros(len(built), T, dtype=torch.long)
            allowed = torch.zeros(len(built), T, T, dtype=torch.bool)
            causal = torch.ones(T, T, dtype=torch.bool).tril()
            for r, ((p, _), (toks, pos, chains, _)) in enumerate(zip(chunk, built, strict=True)):
                L = len(p)
                ids[r, : len(toks)] = torch.tensor(toks)
                pos_t[r, : len(pos)] = torch.tensor(pos)
                allowed[r, :, :L] = causal[:, :L]  # the prompt, causally (padding sees it too)
                if chains:
                    q = torch.tensor([L + n for n, ch in enumerate(chains) for _ in ch])
                    allowed[r, L:, :L] = True
                    allowed[r, q, torch.tensor([k for ch in chains for k in ch])] = True
            mask = torch.where(allowed, 0.0, neg)[:, None].to(dev)
            states = model.base(
                ids.to(dev), attention_mask=mask, position_ids=pos_t.to(dev), use_cache=False
            ).last_hidden_state
            if hidden is not None:
                for r, (p, idx) in enumerate(chunk):
                    for i in idx:
                        hidden[i] = states[r, : len(p)]
            # one gather for every continuation token of the forward (per-continuation indexing
            # would make backward allocate a logits-sized gradient per continuation)
            rr, pp, lab, owners = [], [], [], []
            for r, ((_, idx), (_, _, _, at)) in enumerate(zip(chunk, built, strict=True)):
                for i, where in zip(idx, at, strict=True):
                    c = rows[i][1]
                    rr += [r] * len(c)
                    pp += where
                    lab += c
                    owners.append((i, len(c)))
            # the LM head on these positions only: (tokens, vocabulary), not (rows, T, vocabulary)
            sel = model.logits_at(
                states[torch.tensor(rr, device=dev), torch.tensor(pp, device=dev)]
            )
            lp = token_logprobs(sel[None], torch.tensor([lab], device=dev))[0]
            for (i, _), part in zip(owners, torch.split(lp, [n for _, n in owners]), strict=True):
                out[i] = part
        return out  # type: ignore[return-value]
    finally:
        model.train(was_training)


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


def _flat(parts: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-trajectory log-probs (one per decision or token) -> (N, T) padded + mask."""
    T = max(int(p.shape[0]) for p in parts)
    mask = torch.zeros(len(parts), T, device=parts[0].device)
    rows = [torch.cat([p, p.new_zeros(T - p.shape[0])]) for p in parts]
    lp = torch.stack(rows)
    for i, p in enumerate(parts):
        mask[i, : p.shape[0]] = 1.0
    return lp, mask


class _Rows:
    """Distinct (prompt, continuation) rows of a micro-batch (a group's shared first page is scored once)."""

    def __init__(self) -> None:
        self.rows: list[tuple[list[int], list[int]]] = []
        self._index: dict[tuple, int] = {}

    def add(self, prompt: list[int], cont: list[int]) -> int:
        key = (tuple(prompt), tuple(cont))
        if key not in self._index:
            self._index[key] = len(self.rows)
            self.rows.append((prompt, cont))
        return self._index[key]


@dataclass
class _Split:
    """The batch by use (see the module doc): GSPO and expert trajectories with their steps, the
    rest counted."""

    gspo: list[tuple[Any, list]] = field(default_factory=list)
    bc: list[tuple[Any, list]] = field(default_factory=list)
    skipped: int = 0
    ungrouped: Counter = field(default_factory=Counter)
    mine: set[int] | None = None  # the ``id`` of the trajectories scored (default all)


def _split_batch(trajectories: list, select: Collection[int] | None = None) -> _Split:
    out = _Split(mine=None if select is None else {id(trajectories[i]) for i in select})
    for tr in trajectories:
        steps = tr.steps()
        if tr.source == "expert":
            out.bc.append((tr, steps))
        elif not (steps and all(s.behaviour_logprob is not None for s in steps)):
            out.skipped += 1
        elif not tr.group_id:  # counted, never trained on (a group of one has no advantage)
            out.ungrouped[tr.source] += 1
        else:
            out.gspo.append((tr, steps))
    return out


def _chunk_items(split: _Split, backward: bool, chunk_rows: int) -> list[list[tuple]]:
    """Work items ``(kind, index within its kind, trajectory, steps)``, GSPO ones first: with
    ``backward`` in micro-batches of at least ``chunk_rows`` steps (the last one smaller), else one."""
    items = [("gspo", i, tr, st) for i, (tr, st) in enumerate(split.gspo)] + [
        ("bc", i, tr, st) for i, (tr, st) in enumerate(split.bc)
    ]
    items = [it for it in items if split.mine is None or id(it[2]) in split.mine]
    chunks, cur, n_rows = [], [], 0
    for it in items:
        cur.append(it)
        n_rows += len(it[3])
        if backward and n_rows >= chunk_rows:
            chunks.append(cur)
            cur, n_rows = [], 0
    if cur:
        chunks.append(cur)
    if not backward and chunks:
        chunks = [[it for c in chunks for it in c]]
    return chunks


def _new_agg() -> dict:
    return {
        "clip_frac": 0.0,
        "kl": 0.0,
        "ratio_mean": 0.0,
        "ratio_min": float("inf"),
        "ratio_max": -float("inf"),
    }


def _new_counts() -> dict:
    return {
        "cand_mismatch": 0,
        "cand_missing": 0,
        "cand_unhashed": 0,
        "bc_not_candidate": 0,
        "cand_rows": 0,
        "cand_total": 0,
        "decisions": 0,
    }


@dataclass
class _Totals:
    """What the micro-batches add up: per-GSPO-trajectory log ratios, per-source stats
    (``source_stats``), the GSPO aggregates (each micro-batch weighted by its share of the GSPO
    trajectories), candidate counters and the two loss terms' values."""

    log_ratios: list[float]
    by_source: dict[str, dict]
    agg: dict = field(default_factory=_new_agg)
    cnt: dict = field(default_factory=_new_counts)
    g_loss: float = 0.0
    b_loss: float = 0.0


def _plan_step(rows: _Rows, d: Decision, gspo: bool, cnt: dict) -> tuple:
    """One decision's (candidate row ids, index of the action | -1, fallback row id | -1, T); a GSPO
    action missing from the rebuilt set is scored along with it, an expert one by its own row."""
    ids = [rows.add(d.prompt, c) for c in d.cand_ids]
    k, fb = d.index, -1
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
    return ids, k, fb, d.temperature


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


def _plan_chunk(
    tokenizer: Tokenizer,
    chunk: list[tuple],
    max_pos: int,
    t_default: float,
    cnt: dict,
    prepared: dict[int, list[Decision]] | None = None,
) -> tuple[_Rows, list[list[tuple]]]:
    """The micro-batch's distinct rows to score and, per item, the ``_plan_step`` of each step
    (decisions from ``prepared`` where the trajectory is there, else built now)."""
    rows = _Rows()
    plan = []
    for kind, _, tr, st in chunk:
        ds = prepared.get(id(tr)) if prepared else None
        if ds is None:
            ds = trajectory_decisions(tokenizer, st, max_pos, t_default)
        plan.append([_plan_step(rows, d, kind == "gspo", cnt) for d in ds])
    cnt["cand_rows"] += len(rows.rows)
    return rows, plan


def _decision_logprobs(
    model: Policy, tokenizer: Tokenizer, rows: _Rows, plan: list[list[tuple]]
) -> list[torch.Tensor]:
    """Per item, ``log pi_T(a|s)`` of each decision (with grad): ``candidate_logprobs`` of the
    candidates' summed token log-probs, or, for an expert action outside C(s), the mean token
    log-likelihood of its text + eos."""
    hidden: dict[int, torch.Tensor] | None = {} if model.element_head is not None else None
    lps = action_logprobs(model, tokenizer, rows.rows, hidden=hidden)
    seq = [lp.sum() for lp in lps]
    if hidden is not None:  # the element pointer's term, as acting adds it
        seq = [
            a + b
            for a, b in zip(seq, row_terms(model.element_head, rows.rows, hidden), strict=True)
        ]
    per_traj = []
    for steps_plan in plan:
        vals = []
        for ids, k, fb, temp in steps_plan:
            if k >= 0:
                vals.append(candidate_logprobs(torch.stack([seq[r] for r in ids]), temp)[k])
            else:  # expert action outside C(s): mean token log-likelihood of its text + eos
                vals.append(lps[fb].mean())
        per_traj.append(torch.stack(vals))
    return per_traj


def _gspo_term(
    chunk: list[tuple],
    per_traj: list[torch.Tensor],
    adv: torch.Tensor,
    n_gspo: int,
    cfg: TrainerConfig,
    tot: _Totals,
) -> torch.Tensor | None:
    """The micro-batch's share (its GSPO trajectories / all of them) of the GSPO loss, None without
    GSPO items; records their ratios per source, their log ratios and the weighted aggregates."""
    gi = [k for k, it in enumerate(chunk) if it[0] == "gspo"]
    if not gi:
        return None
    lp, mask = _flat([per_traj[k] for k in gi])
    dev = lp.device
    old = torch.tensor(
        [sum(float(s.behaviour_logprob) for s in chunk[k][3]) for k in gi], device=dev
    )
    a = adv[[chunk[k][1] for k in gi]].to(dev)
    loss_g, st = gspo_loss(lp, old, mask, a, cfg.clip_low, cfg.clip_high)
    for k, r, c in zip(gi, st["ratio_seq"], st["clipped_seq"], strict=True):
        src = tot.by_source[chunk[k][2].source]
        src["ratio_sum"] += r
        src["clipped"] += int(c)
    with torch.no_grad():
        lr = ((lp * mask).sum(-1) - old) / mask.sum(-1).clamp(min=1.0)
    for j, k in enumerate(gi):
        tot.log_ratios[chunk[k][1]] = float(lr[j])
    w = len(gi) / n_gspo
    tot.g_loss += w * float(loss_g.detach())
    for key in ("clip_frac", "kl", "ratio_mean"):
        tot.agg[key] += w * st[key]
    tot.agg["ratio_min"] = min(tot.agg["ratio_min"], st["ratio_min"])
    tot.agg["ratio_max"] = max(tot.agg["ratio_max"], st["ratio_max"])
    return w * loss_g


def _bc_term(
    chunk: list[tuple],
    per_traj: list[torch.Tensor],
    bc_steps: int,
    bc_weight: float,
    tot: _Totals,
) -> torch.Tensor | None:
    """``bc_weight`` x the micro-batch's share (its expert steps / all of them) of the BC loss, None
    without expert items."""
    bi = [k for k, it in enumerate(chunk) if it[0] == "bc"]
    if not bi:
        return None
    lp, mask = _flat([per_traj[k] for k in bi])
    w = float(mask.sum()) / max(1, bc_steps)
    loss_b = bc_loss(lp, mask)
    tot.b_loss += w * float(loss_b.detach())
    return bc_weight * w * loss_b


def _policy_metrics(
    total: torch.Tensor, split: _Split, rewards: torch.Tensor, adv: torch.Tensor, tot: _Totals
) -> dict:
    agg = dict(tot.agg)
    if not split.gspo:
        agg.update(ratio_min=1.0, ratio_max=1.0, ratio_mean=1.0)
    cnt = dict(tot.cnt)
    n_dec = cnt["decisions"]
    return {
        "loss": float(total.detach()),
        "gspo_loss": tot.g_loss,
        "bc_loss": tot.b_loss,
        "n_gspo": len(split.gspo),
        "n_bc": len(split.bc),
        "n_skipped": split.skipped,
        "adv_abs": float(adv.abs().mean()) if len(adv) else 0.0,
        "reward_mean": float(rewards.mean()) if len(rewards) else 0.0,
        **agg,
        "cand_per_step": cnt.pop("cand_total") / max(1, n_dec),
        **cnt,
        "log_ratios": tot.log_ratios,
        "by_source": tot.by_source,
        "ungrouped": dict(split.ungrouped),
    }


def policy_batch_loss(
    model: Policy,
    tokenizer: Tokenizer,
    trajectories: list,
    cfg: TrainerConfig,
    model_cfg: ModelConfig,
    backward: bool = False,
    chunk_rows: int = 32,
    backward_fn: Callable | None = None,
    prepared: dict[int, list[Decision]] | None = None,
    select: Collection[int] | None = None,
) -> tuple[torch.Tensor, dict]:
    """GSPO on trajectories with behaviour log-probs + bc_weight * BC on expert ones (see module doc).

    ``select``: positions to score (a trainer rank's share), with the whole batch's normalisers.
    Both train ``log pi_T(a|s)`` over the rebuilt candidate sets.  Extra metrics:
    ``log_ratios`` (per GSPO trajectory, in batch order: ``(sum log pi - sum
    behaviour) / n_decisions``), ``cand_mismatch`` (GSPO steps whose rebuilt
    candidate hash differs from the recorded one; trained with the rebuilt set),
    ``cand_missing`` (GSPO steps whose action is not in the rebuilt set: added to
    it), ``cand_unhashed`` (GSPO steps without a recorded hash), ``bc_not_candidate``
    (expert steps whose action is not a candidate: token NLL instead),
    ``cand_per_step``, ``cand_rows`` (distinct candidate rows scored) and ``decisions`` (steps scored).
    """
    max_pos = int(model_cfg.max_positions)
    t_default = float(cfg.policy_temperature or 1.0)
    split = _split_batch(trajectories, select)
    gspo = split.gspo
    rewards = torch.tensor([task_success_reward(tr.reward) for tr, _ in gspo])
    adv = group_advantages(rewards, [tr.group_id for tr, _ in gspo]) if gspo else torch.zeros(0)
    tot = _Totals([0.0] * len(gspo), source_stats([tr for tr, _ in gspo], adv))
    bc_steps = sum(len(st) for _, st in split.bc)
    total = torch.zeros(())
    dev = next(model.parameters()).device
    for chunk in _chunk_items(split, backward, chunk_rows):
        rows, plan = _plan_chunk(tokenizer, chunk, max_pos, t_default, tot.cnt, prepared)
        per_traj = _decision_logprobs(model, tokenizer, rows, plan)
        part = torch.zeros((), device=dev)
        g_term = _gspo_term(chunk, per_traj, adv, len(gspo), cfg, tot)
        if g_term is not None:
            part = part + g_term
        b_term = _bc_term(chunk, per_traj, bc_steps, cfg.bc_weight, tot)
        if b_term is not None:
            part = part + b_term
        if backward:
            (backward_fn or (lambda x: x.backward()))(part)
            total = total + float(part.detach())
        else:
            total = total + part
    return total, _policy_metrics(total, split, rewards, adv, tot)
