"""Records -> losses (model forward passes only; no Kafka, S3 or DeepSpeed here).

``policy_batch_loss`` trains the policy's own distribution, ``pi_T(a|s)`` =
softmax over the page's candidate actions C(s) of score/T (``models.policy``).
Every trajectory step is rebuilt as the runner saw it (``trajectory_decisions``):
the ``models.prompts`` policy prompt with history = the trajectory's previous
action texts, and C(s) from ``models.policy.policy_candidates`` -- the function
the runner acted with.  Every candidate (text + eos) is scored with grad
(``action_logprobs``; all candidates of a step share its prompt, so they are
packed into one forward row as a token trie, and identical rows -- a group's
first page -- are scored once), and ``log pi_T(a|s) = log_softmax(scores / T)[a]``, with T the
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
engine's backward as ``backward_fn``) without changing the gradient.

``world_model_batch_loss``: target = ``change_target`` (why + edit script from
``diff_to_change`` + reward + done) + eos; loss = token likelihood +
``infonce_weight`` * InfoNCE(page_head(mean hidden over the change tokens),
frozen MiniLM embedding of the real next page, other distinct pages of the batch
as negatives) + ``wm_head_weight`` * (class-balanced CE of ``reward_head`` on task
success + the same of ``done_head`` on done), both heads on the last prompt
token's hidden state.  Without an embedder (or < 2 distinct pages) the InfoNCE is 0.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from core.spaces import Observation, parse_action
from models.losses import (
    balanced_cross_entropy,
    bc_loss,
    class_balanced_weights,
    group_advantages,
    gspo_loss,
    info_nce,
    lm_loss,
    task_success_reward,
    token_logprobs,
)
from models.policy import MAX_CANDIDATES, candidate_logprobs, candidates_hash, policy_candidates
from models.prompts import action_ids, policy_prompt_ids, world_model_prompt_ids
from models.tokenizer import encode, pad_id
from models.world_model import HEADS, change_target, mark_heads_trained

INFONCE_TEMPERATURE = 0.1


def _pad_rows(rows: list[list[int]], pad: int) -> torch.Tensor:
    T = max(len(r) for r in rows)
    out = torch.full((len(rows), T), pad, dtype=torch.long)
    for i, r in enumerate(rows):
        out[i, : len(r)] = torch.tensor(r)
    return out


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
    ``type(6, "``) is computed once, as in ``models.policy.score_continuations``.
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
    model: Any, tokenizer: Any, rows: list[tuple[list[int], list[int]]], rows_per_forward: int = 16
) -> list[torch.Tensor]:
    """Token log-probs of each row's continuation given its prompt (with grad).

    ``rows``: (prompt_ids, continuation_ids).  Rows with the same prompt (all the
    candidates of a step, the G rollouts of a group at their first step, repeated
    pages) share one forward row: the prompt, then their continuations as a token
    trie (``_trie_row``: shared prefixes computed once) with a 4D tree mask and
    position ids = prompt length + depth -- exactly what ``PolicyRunner`` scores.
    Packed rows are sorted by length and run ``rows_per_forward`` at a time (little
    padding).  Runs in eval mode (dropout off) and restores the previous mode.
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
            logits = model(
                input_ids=ids.to(dev),
                attention_mask=mask,
                position_ids=pos_t.to(dev),
                use_cache=False,
            ).logits
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
            sel = logits[torch.tensor(rr, device=dev), torch.tensor(pp, device=dev)]
            lp = token_logprobs(sel[None], torch.tensor([lab], device=dev))[0]
            for (i, _), part in zip(owners, torch.split(lp, [n for _, n in owners]), strict=True):
                out[i] = part
        return out  # type: ignore[return-value]
    finally:
        model.train(was_training)


def trajectory_rows(
    tokenizer: Any, steps: list, max_positions: int
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
    cand_ids: list[
        list[int]
    ]  # token ids (text + eos) of every candidate, in ``policy_candidates`` order
    index: int  # the recorded action's index in the candidates, -1 if it is not one of them
    action_ids: list[int]
    hash: str  # ``candidates_hash`` of the rebuilt set
    recorded_hash: str  # the transition's ``candidates_hash`` ("" = not recorded)
    temperature: (
        float  # T of ``log pi_T``: the transition's ``info["temperature"]``, else the trainer's
    )


def _canonical(text: str) -> str:
    try:
        return parse_action(text).to_text()
    except Exception:  # noqa: BLE001 - an unparsable text simply matches no candidate
        return text


def trajectory_decisions(
    tokenizer: Any,
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


def policy_batch_loss(
    model: Any,
    tokenizer: Any,
    trajectories: list,
    cfg: Any,
    model_cfg: Any,
    backward: bool = False,
    chunk_rows: int = 32,
    backward_fn: Callable | None = None,
) -> tuple[torch.Tensor, dict]:
    """GSPO on trajectories with behaviour log-probs + bc_weight * BC on expert ones (see module doc).

    Both train ``log pi_T(a|s)`` over the rebuilt candidate sets.  Extra metrics:
    ``log_ratios`` (per GSPO trajectory, in batch order: ``(sum log pi - sum
    behaviour) / n_decisions``), ``cand_mismatch`` (GSPO steps whose rebuilt
    candidate hash differs from the recorded one; trained with the rebuilt set),
    ``cand_missing`` (GSPO steps whose action is not in the rebuilt set: added to
    it), ``cand_unhashed`` (GSPO steps without a recorded hash), ``bc_not_candidate``
    (expert steps whose action is not a candidate: token NLL instead),
    ``cand_per_step`` and ``cand_rows`` (distinct candidate rows scored).
    """
    max_pos = int(getattr(model_cfg, "max_positions", model.config.max_position_embeddings))
    t_default = float(getattr(cfg, "policy_temperature", 1.0) or 1.0)
    gspo, bc, skipped, ungrouped = [], [], 0, Counter()
    for tr in trajectories:
        steps = tr.steps()
        if tr.source == "expert":
            bc.append((tr, steps))
        elif not (steps and all(s.behaviour_logprob is not None for s in steps)):
            skipped += 1
        elif not tr.group_id:
            ungrouped[tr.source] += 1  # counted, never trained on (a group of one has no advantage)
        else:
            gspo.append((tr, steps))
    rewards = torch.tensor([task_success_reward(tr.reward) for tr, _ in gspo])
    adv = group_advantages(rewards, [tr.group_id for tr, _ in gspo]) if gspo else torch.zeros(0)
    by_source = source_stats([tr for tr, _ in gspo], adv)
    items = [("gspo", i, tr, st) for i, (tr, st) in enumerate(gspo)] + [
        ("bc", i, tr, st) for i, (tr, st) in enumerate(bc)
    ]
    bc_steps = sum(len(st) for _, st in bc)
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
    total = torch.zeros(())
    agg = {
        "clip_frac": 0.0,
        "kl": 0.0,
        "ratio_mean": 0.0,
        "ratio_min": float("inf"),
        "ratio_max": -float("inf"),
    }
    cnt = {
        "cand_mismatch": 0,
        "cand_missing": 0,
        "cand_unhashed": 0,
        "bc_not_candidate": 0,
        "cand_rows": 0,
        "cand_total": 0,
        "decisions": 0,
    }
    log_ratios = [0.0] * len(gspo)
    g_loss = b_loss = 0.0
    dev = next(model.parameters()).device
    for chunk in chunks:
        rows = _Rows()
        plan = []  # per item: [(candidate row ids, index of the action | -1, fallback row id, T)] per step
        for kind, _, _, st in chunk:
            steps_plan = []
            for d in trajectory_decisions(tokenizer, st, max_pos, t_default):
                ids = [rows.add(d.prompt, c) for c in d.cand_ids]
                k, fb = d.index, -1
                cnt["decisions"] += 1
                cnt["cand_total"] += len(ids)
                if kind == "gspo":
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
                steps_plan.append((ids, k, fb, d.temperature))
            plan.append(steps_plan)
        cnt["cand_rows"] += len(rows.rows)
        lps = action_logprobs(model, tokenizer, rows.rows)
        seq = [lp.sum() for lp in lps]
        per_traj = []
        for steps_plan in plan:
            vals = []
            for ids, k, fb, temp in steps_plan:
                if k >= 0:
                    vals.append(candidate_logprobs(torch.stack([seq[r] for r in ids]), temp)[k])
                else:  # expert action outside C(s): mean token log-likelihood of its text + eos
                    vals.append(lps[fb].mean())
            per_traj.append(torch.stack(vals))
        part = torch.zeros((), device=dev)
        gi = [k for k, it in enumerate(chunk) if it[0] == "gspo"]
        if gi:
            lp, mask = _flat([per_traj[k] for k in gi])
            old = torch.tensor(
                [sum(float(s.behaviour_logprob) for s in chunk[k][3]) for k in gi], device=dev
            )
            a = adv[[chunk[k][1] for k in gi]].to(dev)
            loss_g, st = gspo_loss(lp, old, mask, a, cfg.clip_low, cfg.clip_high)
            for k, r, c in zip(gi, st["ratio_seq"], st["clipped_seq"], strict=True):
                src = by_source[chunk[k][2].source]
                src["ratio_sum"] += r
                src["clipped"] += int(c)
            with torch.no_grad():
                lr = ((lp * mask).sum(-1) - old) / mask.sum(-1).clamp(min=1.0)
            for j, k in enumerate(gi):
                log_ratios[chunk[k][1]] = float(lr[j])
            w = len(gi) / len(gspo)
            part = part + w * loss_g
            g_loss += w * float(loss_g.detach())
            for k in ("clip_frac", "kl", "ratio_mean"):
                agg[k] += w * st[k]
            agg["ratio_min"] = min(agg["ratio_min"], st["ratio_min"])
            agg["ratio_max"] = max(agg["ratio_max"], st["ratio_max"])
        bi = [k for k, it in enumerate(chunk) if it[0] == "bc"]
        if bi:
            lp, mask = _flat([per_traj[k] for k in bi])
            w = float(mask.sum()) / max(1, bc_steps)
            loss_b = bc_loss(lp, mask)
            part = part + cfg.bc_weight * w * loss_b
            b_loss += w * float(loss_b.detach())
        if backward:
            (backward_fn or (lambda x: x.backward()))(part)
            total = total + float(part.detach())
        else:
            total = total + part
    if not gspo:
        agg.update(ratio_min=1.0, ratio_max=1.0, ratio_mean=1.0)
    n_dec = cnt.pop("decisions")
    metrics = {
        "loss": float(total.detach()),
        "gspo_loss": g_loss,
        "bc_loss": b_loss,
        "n_gspo": len(gspo),
        "n_bc": len(bc),
        "n_skipped": skipped,
        "adv_abs": float(adv.abs().mean()) if len(adv) else 0.0,
        "reward_mean": float(rewards.mean()) if len(rewards) else 0.0,
        **agg,
        "cand_per_step": cnt.pop("cand_total") / max(1, n_dec),
        **cnt,
        "log_ratios": log_ratios,
        "by_source": by_source,
        "ungrouped": dict(ungrouped),
    }
    return total, metrics


def source_stats(trajs: list, adv: torch.Tensor) -> dict[str, dict]:
    """Per source (``real``, ``dream``): trajectories, groups, groups with a nonzero advantage and the
    sum of |advantage| of the GSPO trajectories; ``ratio_sum`` and ``clipped`` are filled in by the loss."""
    out: dict[str, dict] = {}
    groups: dict[tuple, bool] = {}
    for tr, a in zip(trajs, adv.tolist(), strict=True):
        s = out.setdefault(
            tr.source,
            {
                "trajectories": 0,
                "groups": 0,
                "groups_nonzero": 0,
                "adv_abs_sum": 0.0,
                "ratio_sum": 0.0,
                "clipped": 0,
            },
        )
        s["trajectories"] += 1
        s["adv_abs_sum"] += abs(a)
        key = (tr.source, tr.group_id)
        groups[key] = groups.get(key, False) or a != 0.0
    for (src, _), nonzero in groups.items():
        out[src]["groups"] += 1
        out[src]["groups_nonzero"] += int(nonzero)
    return out


def _wm_rows(
    tokenizer: Any, transitions: list, max_pos: int, max_change_tokens: int
) -> tuple[list, list, int]:
    """(rows of (prompt ids, target ids + eos), real next trees, number of ``page`` targets)."""
    eos = int(tokenizer.eos_token_id)
    rows, next_trees, n_page = [], [], 0
    for t in transitions:
        obs, nxt = Observation.from_dict(t.obs), Observation.from_dict(t.next_obs)
        text = change_target(obs, nxt, float(t.reward), bool(t.done))
        n_page += text.split("\n", 2)[1:2] == ["page"]
        target = (encode(tokenizer, text) + [eos])[: max_pos // 2]
        reserve = max(max_change_tokens, len(target))
        rows.append((world_model_prompt_ids(tokenizer, obs, t.action, max_pos, reserve), target))
        next_trees.append(nxt.tree)
    return rows, next_trees, n_page


def _wm_forward(
    model: Any, tokenizer: Any, rows: list, hidden: bool, heads: bool = False
) -> tuple[Any, torch.Tensor, torch.Tensor, Any, Any]:
    """One padded forward (train mode) of ``rows`` -> (output, labels, target mask, pooled change hidden | None,
    last prompt token's hidden state | None (``heads``: the reward/done heads' input))."""
    was_training = model.training
    model.train()
    try:
        ids = _pad_rows([p + c for p, c in rows], pad_id(tokenizer))
        dev = next(model.parameters()).device
        out = model(input_ids=ids.to(dev), use_cache=False, output_hidden_states=hidden or heads)
    finally:
        model.train(was_training)
    T = ids.shape[1]
    labels = torch.zeros(len(rows), T - 1, dtype=torch.long, device=dev)
    mask = torch.zeros(len(rows), T - 1, device=dev)
    for i, (p, c) in enumerate(rows):
        labels[i, len(p) - 1 : len(p) - 1 + len(c)] = torch.tensor(c, device=dev)
        mask[i, len(p) - 1 : len(p) - 1 + len(c)] = 1.0
    pooled = None
    if hidden:
        tmask = torch.zeros(len(rows), T, device=dev)
        for i, (p, c) in enumerate(rows):
            tmask[i, len(p) : len(p) + len(c)] = 1.0
        h = out.hidden_states[-1]
        pooled = (h * tmask[..., None]).sum(1) / tmask.sum(1, keepdim=True).clamp(min=1.0)
    last = None
    if (
        heads
    ):  # the position that predicts the first change token (as WorldModelRunner's prefill reads it)
        last = out.hidden_states[-1][
            torch.arange(len(rows), device=dev),
            torch.tensor([len(p) - 1 for p, _ in rows], device=dev),
        ]
    return out, labels, mask, pooled, last


def _wm_head_targets(transitions: list, dev: Any) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """head name -> (labels, whole-batch class-balanced weights): reward_head = task success
    (``task_success_reward(raw) > 0``), done_head = done."""
    succ = torch.tensor(
        [int(task_success_reward(float(t.reward)) > 0) for t in transitions], device=dev
    )
    done = torch.tensor([int(bool(t.done)) for t in transitions], device=dev)
    return {
        name: (y, class_balanced_weights(y, 2)) for name, y in zip(HEADS, (succ, done), strict=True)
    }


def _wm_head_loss(
    model: Any, last: torch.Tensor, targets: dict, idx: list[int]
) -> tuple[torch.Tensor, dict]:
    """Sum over the heads of their class-balanced CE on rows ``idx`` (weights of the whole batch, so
    micro-batches add up to the whole batch's loss) -> (loss, {name: (loss, weighted correct)})."""
    sel = torch.tensor(idx, device=last.device)
    total, parts = last.new_zeros((), dtype=torch.float32), {}
    for name, (y, w) in targets.items():
        loss, st = balanced_cross_entropy(getattr(model, name)(last), y[sel], w[sel])
        total = total + loss
        parts[name] = (float(loss.detach()), st["acc"])
    return total, parts


def _wm_head_metrics(parts: dict, targets: dict) -> dict:
    out = {}
    for name, (loss, acc) in parts.items():
        k = name.removesuffix("_head")
        out.update(
            {
                f"{k}_head_loss": loss,
                f"{k}_head_acc": acc,
                f"{k}_positive_share": float(targets[name][0].float().mean()),
            }
        )
    return out


def _distinct(next_trees: list[str]) -> list[int]:
    """Index of the first row of each distinct next page (the InfoNCE rows)."""
    first: dict[str, int] = {}
    for i, tr in enumerate(next_trees):
        first.setdefault(tr, i)
    return list(first.values())


def wm_chunks(rows: list, chunk_rows: int) -> list[list[int]]:
    """Row indices in micro-batches of ``chunk_rows``, rows of similar length together (little padding)."""
    order = sorted(range(len(rows)), key=lambda i: len(rows[i][0]) + len(rows[i][1]))
    n = max(1, int(chunk_rows))
    return [order[i : i + n] for i in range(0, len(order), n)]


def world_model_batch_loss(
    model: Any,
    tokenizer: Any,
    transitions: list,
    cfg: Any,
    embedder: Any = None,
    max_change_tokens: int = 160,
    backward: bool = False,
    chunk_rows: int = 8,
    backward_fn: Callable | None = None,
) -> tuple[torch.Tensor, dict]:
    """Change-text likelihood + infonce_weight * InfoNCE + wm_head_weight * (reward head CE + done
    head CE) (see module doc).

    The heads (``reward_head``: task success, ``done_head``: done, on the last prompt token's
    hidden state) are trained from the transition's reward and done whatever the change text is
    (no parsing, no truncation); each is a class-balanced cross-entropy
    (``models.losses.balanced_cross_entropy``: every row weighted by the inverse of its class's
    count in the batch, weights summing to 1).  Metrics ``reward_head_acc``/``done_head_acc`` are
    the balanced accuracies on the batch.  With gradients enabled the model is then marked
    ``heads_trained`` (``models.world_model.mark_heads_trained``: ``predict`` uses the heads).

    ``backward=True``: the batch runs in micro-batches of ``chunk_rows`` rows
    (sorted by length), each one forward + ``backward_fn`` (default
    ``loss.backward()``), so only one micro-batch's graph is alive at a time (peak
    memory ~ ``chunk_rows`` rows instead of the batch); the gradient is the one of
    the whole-batch loss.  The LM term is a mean over all target tokens, so each
    micro-batch's mean is weighted by its share of the tokens.  The InfoNCE term
    couples the rows (the other pages are the negatives), so it is done the
    GradCache way: one no-grad pass pools every row, the InfoNCE loss and its
    gradient w.r.t. the pooled vectors are computed on them, and each
    micro-batch then back-propagates ``<pooled, that gradient>`` along with its
    LM term (the RNG state of each micro-batch is replayed, so even with dropout
    both passes agree).  A batch of at most ``chunk_rows`` rows is one plain
    forward + backward.  The returned loss is then a detached tensor.  The head terms are sums
    over rows with whole-batch class weights, so each micro-batch adds its rows' share.
    """
    max_pos = int(model.config.max_position_embeddings)
    rows, next_trees, n_page = _wm_rows(tokenizer, transitions, max_pos, max_change_tokens)
    head = getattr(model, "page_head", None)
    use_nce = embedder is not None and head is not None and cfg.infonce_weight > 0
    keep = _distinct(next_trees) if use_nce else []
    use_nce = use_nce and len(keep) >= 2
    head_w = float(getattr(cfg, "wm_head_weight", 1.0))
    dev = next(model.parameters()).device
    targets = (
        _wm_head_targets(transitions, dev)
        if head_w > 0 and all(getattr(model, n, None) is not None for n in HEADS)
        else {}
    )
    if targets and torch.is_grad_enabled():
        mark_heads_trained(model)
    if backward and len(rows) > max(1, int(chunk_rows)):
        return _wm_loss_chunked(
            model,
            tokenizer,
            rows,
            next_trees,
            n_page,
            keep if use_nce else [],
            cfg,
            embedder,
            chunk_rows,
            backward_fn or (lambda x: x.backward()),
            targets,
            head_w,
        )
    out, labels, mask, pooled, last = _wm_forward(
        model, tokenizer, rows, hidden=use_nce, heads=bool(targets)
    )
    loss_lm = lm_loss(out.logits[:, :-1], labels, mask)
    loss = loss_lm
    metrics = {
        "lm_loss": float(loss_lm.detach()),
        "infonce": 0.0,
        "infonce_acc": 0.0,
        "n": len(rows),
        "target_tokens_mean": float(mask.sum()) / max(1, len(rows)),
        "page_fraction": n_page / max(1, len(rows)),
    }
    if use_nce:
        pred = head(pooled[keep])
        target = embedder.embed([next_trees[i] for i in keep]).to(dev)
        loss_nce, st = info_nce(pred, target, INFONCE_TEMPERATURE)
        loss = loss + cfg.infonce_weight * loss_nce
        metrics.update(infonce=float(loss_nce.detach()), infonce_acc=st["acc"])
    if targets:
        loss_h, parts = _wm_head_loss(model, last, targets, list(range(len(rows))))
        loss = loss + head_w * loss_h
        metrics.update(_wm_head_metrics(parts, targets))
    metrics["loss"] = float(loss.detach())
    if backward:  # one micro-batch: the plain backward (no GradCache pre-pass needed)
        (backward_fn or (lambda x: x.backward()))(loss)
        metrics["chunks"] = 1
        return loss.detach(), metrics
    return loss, metrics


def _rng_state() -> tuple:
    return torch.get_rng_state(), (
        torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
    )


def _set_rng_state(state: tuple) -> None:
    torch.set_rng_state(state[0])
    if state[1] is not None:
        torch.cuda.set_rng_state_all(state[1])


def _wm_loss_chunked(
    model: Any,
    tokenizer: Any,
    rows: list,
    next_trees: list,
    n_page: int,
    keep: list[int],
    cfg: Any,
    embedder: Any,
    chunk_rows: int,
    backward_fn: Callable,
    targets: dict | None = None,
    head_w: float = 0.0,
) -> tuple[torch.Tensor, dict]:
    chunks = wm_chunks(rows, chunk_rows)
    n_tok = sum(len(c) for _, c in rows)
    dev = next(model.parameters()).device
    head = model.page_head if keep else None
    states: list = []
    grad_pooled: dict[int, torch.Tensor] = {}
    nce_head = None
    metrics = {"infonce": 0.0, "infonce_acc": 0.0}
    if keep:
        pooled_all: list[torch.Tensor | None] = [None] * len(rows)
        with torch.no_grad():
            for ch in chunks:
                states.append(_rng_state())
                _, _, _, pooled, _ = _wm_forward(
                    model, tokenizer, [rows[i] for i in ch], hidden=True
                )
                for k, i in enumerate(ch):
                    pooled_all[i] = pooled[k]
        leaf = torch.stack([pooled_all[i] for i in keep]).detach().requires_grad_(True)  # type: ignore[misc]
        target = embedder.embed([next_trees[i] for i in keep]).to(dev)
        loss_nce, st = info_nce(head(leaf), target, INFONCE_TEMPERATURE)
        (g,) = torch.autograd.grad(cfg.infonce_weight * loss_nce, leaf)
        grad_pooled = {i: g[k] for k, i in enumerate(keep)}
        nce_head = (leaf.detach(), target)
        metrics.update(infonce=float(loss_nce.detach()), infonce_acc=st["acc"])
    total_lm = 0.0
    head_parts: dict[str, list[float]] = {name: [0.0, 0.0] for name in targets or {}}
    for c, ch in enumerate(chunks):
        if states:
            _set_rng_state(states[c])
        out, labels, mask, pooled, last = _wm_forward(
            model, tokenizer, [rows[i] for i in ch], hidden=bool(keep), heads=bool(targets)
        )
        w = float(mask.sum()) / max(1, n_tok)
        loss_c = lm_loss(out.logits[:, :-1], labels, mask)
        total_lm += w * float(loss_c.detach())
        part = w * loss_c
        sel = [k for k, i in enumerate(ch) if i in grad_pooled]
        if sel:
            g = torch.stack([grad_pooled[ch[k]] for k in sel])
            part = part + (pooled[sel] * g).sum()
        if c == 0 and nce_head is not None:  # the page head's own gradient (its input held fixed)
            part = (
                part
                + cfg.infonce_weight
                * info_nce(head(nce_head[0]), nce_head[1], INFONCE_TEMPERATURE)[0]
            )
        if targets:  # this micro-batch's rows' share of the heads' whole-batch weighted CE
            loss_h, parts = _wm_head_loss(model, last, targets, ch)
            part = part + head_w * loss_h
            for name, (lo, acc) in parts.items():
                head_parts[name][0] += lo
                head_parts[name][1] += acc
        backward_fn(part)
    loss = total_lm + (cfg.infonce_weight * metrics["infonce"] if keep else 0.0)
    if targets:
        metrics.update(_wm_head_metrics({n: tuple(v) for n, v in head_parts.items()}, targets))
        loss += head_w * sum(v[0] for v in head_parts.values())
    metrics.update(
        lm_loss=total_lm,
        n=len(rows),
        target_tokens_mean=n_tok / max(1, len(rows)),
        page_fraction=n_page / max(1, len(rows)),
        loss=loss,
        chunks=len(chunks),
    )
    return torch.tensor(loss), metrics


# --- one optimiser step through a DeepSpeed engine (the trainer and `bench train`) -------------


def policy_update(
    engine: Any, tokenizer: Any, trajectories: list, cfg: Any, model_cfg: Any
) -> tuple:
    """``policy_batch_loss`` + the engine's step; in micro-batches of ``cfg.chunk_rows`` step rows
    (each one forward + ``engine.backward``) where the engine allows it.  Returns
    ``(loss, stats, grad_norm, time the loss was done)``."""
    from models.engine import chunked_backward_ok, engine_step

    chunked = cfg.chunk_rows > 0 and chunked_backward_ok(engine, cfg.zero_stage)
    loss, stats = policy_batch_loss(
        engine.module,
        tokenizer,
        trajectories,
        cfg,
        model_cfg,
        backward=chunked,
        chunk_rows=max(1, cfg.chunk_rows),
        backward_fn=engine.backward if chunked else None,
    )
    t1 = time.time()
    return loss, stats, engine_step(engine, None if chunked else loss), t1


def world_model_update(
    engine: Any, tokenizer: Any, transitions: list, cfg: Any, embedder: Any, max_change_tokens: int
) -> tuple:
    """``world_model_batch_loss`` + the engine's step, chunked by ``cfg.wm_chunk_rows`` where the
    engine allows it.  Returns ``(loss, stats, grad_norm)``."""
    from models.engine import chunked_backward_ok, engine_step

    chunked = cfg.wm_chunk_rows > 0 and chunked_backward_ok(engine, cfg.zero_stage)
    loss, stats = world_model_batch_loss(
        engine.module,
        tokenizer,
        transitions,
        cfg,
        embedder,
        max_change_tokens,
        backward=chunked,
        chunk_rows=max(1, cfg.wm_chunk_rows),
        backward_fn=engine.backward if chunked else None,
    )
    return loss, stats, engine_step(engine, None if chunked else loss)
