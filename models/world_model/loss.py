"""Transitions -> the world model's loss (model forward passes only; no Kafka, S3 or DeepSpeed here).

``world_model_batch_loss``: target = ``change_target`` (why + edit script from
``diff_to_change`` + reward + done) + eos; loss = token likelihood +
``infonce_weight`` * InfoNCE(page_head(mean hidden over the change tokens),
frozen MiniLM embedding of the real next page, other distinct pages of the batch
as negatives) + ``wm_head_weight`` * (class-balanced CE of ``reward_head`` on task
success + the same of ``done_head`` on done + plain CE of ``change_head`` on the kind of
proposal that is the real next page), the heads on their input
(``WorldModel.head_input``: the mean hidden state over the acted element's page line and the
action, ``models.world_model.heads.head_positions``, plus the named lines' layer).  One forward
of the model (``WorldModel.forward``) gives the target tokens' logits, the pooled change states,
the page embedding and the heads' logits.  Without an embedder (or < 2 distinct pages) the
InfoNCE is 0.
With ``backward=True`` a batch larger than ``chunk_rows`` runs in micro-batches
(``_wm_loss_chunked``: GradCache for the InfoNCE term), with the whole batch's gradient.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

import torch

from core.config import TrainerConfig
from core.spaces import Observation
from models.lm.embedder import PageEmbedder
from models.lm.prompts import world_model_prompt_ids
from models.lm.tokenizer import encode, pad_id
from models.lm.types import Tokenizer
from models.losses import (
    balanced_cross_entropy,
    class_balanced_weights,
    info_nce,
    lm_loss,
    task_success_reward,
)
from models.world_model.ensemble import bootstrap_weights, transition_key
from models.world_model.heads import try_parse_action
from models.world_model.model import HEADS, WorldModel, WorldModelOutput
from models.world_model.outputs import change_target
from models.world_model.proposals import change_label

INFONCE_TEMPERATURE = 0.1


def _pad_rows(rows: list[list[int]], pad: int) -> torch.Tensor:
    T = max(len(r) for r in rows)
    out = torch.full((len(rows), T), pad, dtype=torch.long)
    for i, r in enumerate(rows):
        out[i, : len(r)] = torch.tensor(r)
    return out


def _wm_rows(
    tokenizer: Tokenizer, transitions: list, max_pos: int, max_change_tokens: int
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
    model: WorldModel,
    tokenizer: Tokenizer,
    rows: list,
    hidden: bool,
    heads: bool = False,
    page_rows: list[int] | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, WorldModelOutput]:
    """One padded forward (train mode) of ``rows`` -> (the logits of the target tokens, (1, n, V),
    their labels, (1, n), a mask of ones, the model's output: ``pooled`` over the change tokens
    with ``hidden``, the heads' logits with ``heads``).  The LM head runs on the target positions
    only (``WorldModel.forward``'s ``logits_at``), so memory grows with the target tokens, not
    the rows' whole length times the vocabulary.  ``page_rows``: the rows of ``pooled`` the
    page head embeds (``page_embedding``)."""
    ids = _pad_rows([p + c for p, c in rows], pad_id(tokenizer))
    dev = next(model.parameters()).device
    T = ids.shape[1]
    labels = torch.zeros(len(rows), T - 1, dtype=torch.long, device=dev)
    mask = torch.zeros(len(rows), T - 1, device=dev)
    for i, (p, c) in enumerate(rows):
        labels[i, len(p) - 1 : len(p) - 1 + len(c)] = torch.tensor(c, device=dev)
        mask[i, len(p) - 1 : len(p) - 1 + len(c)] = 1.0
    tmask = None
    if hidden:  # the change tokens, whose mean state the page head embeds
        tmask = torch.zeros(len(rows), T, device=dev)
        for i, (p, c) in enumerate(rows):
            tmask[i, len(p) : len(p) + len(c)] = 1.0
    # position t predicts token t + 1: the target positions, the last column never
    at = mask.bool()
    at_full = torch.cat([at, at.new_zeros(len(rows), 1)], 1)
    places = model.head_places(tokenizer, [p for p, _ in rows]) if heads else None
    was_training = model.training
    model.train()
    try:
        out = model(
            ids.to(dev),
            lm_head=False,
            use_cache=False,
            heads=places,
            pool=tmask,
            page_rows=page_rows if hidden else None,
            logits_at=at_full,
        )
    finally:
        model.train(was_training)
    target = labels[at][None]
    return out.logits[None], target, torch.ones_like(target, dtype=torch.float), out


def _wm_head_targets(
    transitions: list, dev: torch.device, model: WorldModel | None = None
) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """head name -> (labels, whole-batch weights): reward_head = task success
    (``task_success_reward(raw) > 0``), done_head = done, class-balanced; change_head (when the
    model has one) = the kind of proposal that is the real next page
    (``models.world_model.proposals.change_label``), uniform weights."""
    succ = torch.tensor(
        [int(task_success_reward(float(t.reward)) > 0) for t in transitions], device=dev
    )
    done = torch.tensor([int(bool(t.done)) for t in transitions], device=dev)
    out = {
        name: (y, class_balanced_weights(y, 2)) for name, y in zip(HEADS, (succ, done), strict=True)
    }
    if model is not None:  # the change head: plain CE, a uniform mean over the batch
        kinds = torch.tensor(
            [
                change_label(
                    Observation.from_dict(t.obs), try_parse_action(t.action), t.next_obs["tree"]
                )
                for t in transitions
            ],
            device=dev,
        )
        out["change_head"] = (
            kinds,
            torch.full((len(transitions),), 1.0 / len(transitions), device=dev),
        )
    if model is not None and model.ensemble is not None:
        out["ensemble_head"] = ensemble_targets(transitions, out, model.ensemble.k, dev)
    return out


def ensemble_targets(
    transitions: list, targets: dict, k: int, dev: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """The ensemble's labels (2, B): success and done, as the single heads', and weights
    (2, K, B): the single heads' class-balanced weights times each member's bootstrap weights
    (``models.world_model.ensemble.bootstrap_weights``) over K, so the members' terms add up to
    one head's."""
    boot = bootstrap_weights([transition_key(t) for t in transitions], k).to(dev) / k
    (ys, ws), (yd, wd) = targets["reward_head"], targets["done_head"]
    return torch.stack([ys, yd]), torch.stack([ws[None] * boot, wd[None] * boot])


def _wm_head_loss(
    out: WorldModelOutput, targets: dict, idx: list[int]
) -> tuple[torch.Tensor, dict]:
    """Sum over the heads of their class-balanced CE (on the logits of ``out``) on rows ``idx``
    (weights of the whole batch, so micro-batches add up to the whole batch's loss) -> (loss,
    {name: (loss, weighted correct)})."""
    logits = {
        "reward_head": out.reward_logits,
        "done_head": out.done_logits,
        "change_head": out.change_logits,
    }
    last = out.head_input
    sel = torch.tensor(idx, device=last.device)
    total, parts = last.new_zeros((), dtype=torch.float32), {}
    for name, (y, w) in targets.items():
        if name == "ensemble_head":
            loss, acc = _ensemble_loss(out, y, w, sel)
        else:
            loss, st = balanced_cross_entropy(logits[name], y[sel], w[sel])
            acc = st["acc"]
        total = total + loss
        parts[name] = (float(loss.detach()), acc)
    return total, parts


def _ensemble_loss(
    out: WorldModelOutput, y: torch.Tensor, w: torch.Tensor, sel: torch.Tensor
) -> tuple[torch.Tensor, float]:
    """The members' bootstrapped class-balanced CE on rows ``sel`` (``ensemble_targets``'s
    labels and weights) -> (loss, the members' mean weighted accuracy over both heads)."""
    assert out.ensemble_logits is not None, "a model with an ensemble gives its logits"
    total, acc = w.new_zeros((), dtype=torch.float32), 0.0
    for j, member_logits in enumerate(out.ensemble_logits):  # reward, done: (K, b, 2) each
        for m in range(member_logits.shape[0]):
            loss, st = balanced_cross_entropy(member_logits[m], y[j][sel], w[j, m][sel])
            total, acc = total + loss, acc + st["acc"]
    return total, acc / 2


def _wm_head_metrics(parts: dict, targets: dict) -> dict:
    out = {}
    for name, (loss, acc) in parts.items():
        k = name.removesuffix("_head")
        out.update(
            {
                f"{k}_head_loss": loss,
                f"{k}_head_acc": acc,
            }
        )
        if name not in ("change_head", "ensemble_head"):
            out[f"{k}_positive_share"] = float(targets[name][0].float().mean())
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
    model: WorldModel,
    tokenizer: Tokenizer,
    transitions: list,
    cfg: TrainerConfig,
    embedder: PageEmbedder | None = None,
    max_change_tokens: int = 160,
    backward: bool = False,
    chunk_rows: int = 8,
    backward_fn: Callable | None = None,
    select: Collection[int] | None = None,
) -> tuple[torch.Tensor, dict]:
    """Change-text likelihood + infonce_weight * InfoNCE + wm_head_weight * (reward head CE + done
    head CE) (see module doc).  ``select``: the positions in ``transitions`` to train, a trainer
    rank's share (``_wm_share_loss``); default all.

    The heads (``reward_head``: task success, ``done_head``: done, on ``head_input``: the mean
    hidden state over the acted element's page line and the action) are trained from the
    transition's reward and done whatever the change text is (no parsing, no truncation); each is
    a class-balanced cross-entropy
    (``models.losses.balanced_cross_entropy``: every row weighted by the inverse of its class's
    count in the batch, weights summing to 1).  Metrics ``reward_head_acc``/``done_head_acc`` are
    the balanced accuracies on the batch.  The loss changes no flag of the model: the trainer
    marks the heads trained after its step (``WorldModel.mark_heads_trained``, called by
    ``models.train.learner.world_model_update``).

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
    use_nce = embedder is not None and cfg.infonce_weight > 0
    keep = _distinct(next_trees) if use_nce else []
    use_nce = use_nce and len(keep) >= 2
    head_w = float(cfg.wm_head_weight)
    dev = next(model.parameters()).device
    targets = _wm_head_targets(transitions, dev, model) if head_w > 0 else {}
    args = (model, tokenizer, rows, next_trees, n_page, keep if use_nce else [], cfg, embedder)
    bw = backward_fn or (lambda x: x.backward())
    if select is not None:
        return _wm_share_loss(args, chunk_rows, bw if backward else None, targets, head_w, select)
    if backward and len(rows) > max(1, int(chunk_rows)):
        return _wm_loss_chunked(*args, chunk_rows, bw, targets, head_w)
    logits, labels, mask, out = _wm_forward(
        model, tokenizer, rows, hidden=use_nce, heads=bool(targets), page_rows=keep
    )
    loss_lm = lm_loss(logits, labels, mask)
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
        target = embedder.embed([next_trees[i] for i in keep]).to(dev)
        loss_nce, st = info_nce(out.page_embedding, target, INFONCE_TEMPERATURE)
        loss = loss + cfg.infonce_weight * loss_nce
        metrics.update(infonce=float(loss_nce.detach()), infonce_acc=st["acc"])
    if targets:
        loss_h, parts = _wm_head_loss(out, targets, list(range(len(rows))))
        loss = loss + head_w * loss_h
        metrics.update(_wm_head_metrics(parts, targets))
    metrics["loss"] = float(loss.detach())
    if backward:  # one micro-batch: the plain backward (no GradCache pre-pass needed)
        (backward_fn or (lambda x: x.backward()))(loss)
        metrics["chunks"] = 1
        return loss.detach(), metrics
    return loss, metrics


def _wm_share_loss(
    args: tuple,
    chunk_rows: int,
    backward_fn: Callable | None,
    targets: dict,
    head_w: float,
    select: Collection[int],
) -> tuple[torch.Tensor, dict]:
    """The rows ``select`` of a batch (a data-parallel trainer rank's share, ``models.train.data_parallel``)
    in micro-batches (``_wm_loss_chunked``), weighted as in the whole batch: each row's share of
    the batch's target tokens, the heads' whole-batch class weights, InfoNCE over every row's
    pooled vector (the no-grad pass pools them all); the page head's own InfoNCE term goes with the
    share that holds row 0.  So the shares' losses and gradients add up to the whole batch's.
    Without ``backward_fn`` the micro-batches' terms come back summed with their graphs (the value
    to report is ``metrics["loss"]``).  Metrics ``lm_loss``, ``loss``, ``chunks`` and the heads'
    losses and accuracies are the share's parts, the others the whole batch's."""
    parts: list[torch.Tensor] = []
    loss, metrics = _wm_loss_chunked(
        *args, chunk_rows, backward_fn or parts.append, targets, head_w, select=sorted(select)
    )
    if backward_fn is not None or not parts:
        return loss, metrics
    return torch.stack(parts).sum(), metrics


def _rng_state() -> tuple:
    return torch.get_rng_state(), (
        torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
    )


def _set_rng_state(state: tuple) -> None:
    torch.set_rng_state(state[0])
    if state[1] is not None:
        torch.cuda.set_rng_state_all(state[1])


def _wm_loss_chunked(
    model: WorldModel,
    tokenizer: Tokenizer,
    rows: list,
    next_trees: list,
    n_page: int,
    keep: list[int],
    cfg: TrainerConfig,
    embedder: PageEmbedder | None,
    chunk_rows: int,
    backward_fn: Callable,
    targets: dict | None = None,
    head_w: float = 0.0,
    select: list[int] | None = None,
) -> tuple[torch.Tensor, dict]:
    """The micro-batches of ``world_model_batch_loss``; ``select``: train only these rows (the
    no-grad InfoNCE pass still pools every row; RNG states are replayed only without it)."""
    chunks = wm_chunks(rows, chunk_rows)
    mine = chunks
    if select is not None:
        mine = [[select[k] for k in c] for c in wm_chunks([rows[i] for i in select], chunk_rows)]
    n_tok = sum(len(c) for _, c in rows)
    dev = next(model.parameters()).device
    states: list = []
    grad_pooled: dict[int, torch.Tensor] = {}
    nce_head = None
    metrics = {"infonce": 0.0, "infonce_acc": 0.0}
    if keep:
        pooled_all: list[torch.Tensor | None] = [None] * len(rows)
        with torch.no_grad():
            for ch in chunks:
                states.append(_rng_state())
                pooled = _wm_forward(model, tokenizer, [rows[i] for i in ch], hidden=True)[3].pooled
                for k, i in enumerate(ch):
                    pooled_all[i] = pooled[k]
        leaf = torch.stack([pooled_all[i] for i in keep]).detach().requires_grad_(True)  # type: ignore[misc]
        target = embedder.embed([next_trees[i] for i in keep]).to(dev)
        loss_nce, st = info_nce(model.embed_page(leaf), target, INFONCE_TEMPERATURE)
        (g,) = torch.autograd.grad(cfg.infonce_weight * loss_nce, leaf)
        grad_pooled = {i: g[k] for k, i in enumerate(keep)}
        nce_head = (leaf.detach(), target)
        metrics.update(infonce=float(loss_nce.detach()), infonce_acc=st["acc"])
    total_lm = 0.0
    head_parts: dict[str, list[float]] = {name: [0.0, 0.0] for name in targets or {}}
    page_head_term = nce_head is not None and (select is None or 0 in select)
    for c, ch in enumerate(mine):
        if states and select is None:
            _set_rng_state(states[c])
        logits, labels, mask, out = _wm_forward(
            model, tokenizer, [rows[i] for i in ch], hidden=bool(keep), heads=bool(targets)
        )
        pooled = out.pooled
        w = float(mask.sum()) / max(1, n_tok)
        loss_c = lm_loss(logits, labels, mask)
        total_lm += w * float(loss_c.detach())
        part = w * loss_c
        sel = [k for k, i in enumerate(ch) if i in grad_pooled]
        if sel:
            g = torch.stack([grad_pooled[ch[k]] for k in sel])
            part = part + (pooled[sel] * g).sum()
        if c == 0 and page_head_term:  # the page head's own gradient (its input held fixed)
            part = (
                part
                + cfg.infonce_weight
                * info_nce(model.embed_page(nce_head[0]), nce_head[1], INFONCE_TEMPERATURE)[0]
            )
        if targets:  # this micro-batch's rows' share of the heads' whole-batch weighted CE
            loss_h, parts = _wm_head_loss(out, targets, ch)
            part = part + head_w * loss_h
            for name, (lo, acc) in parts.items():
                head_parts[name][0] += lo
                head_parts[name][1] += acc
        backward_fn(part)
    loss = total_lm + (cfg.infonce_weight * metrics["infonce"] if page_head_term else 0.0)
    if targets:
        metrics.update(_wm_head_metrics({n: tuple(v) for n, v in head_parts.items()}, targets))
        loss += head_w * sum(v[0] for v in head_parts.values())
    metrics.update(
        lm_loss=total_lm,
        n=len(rows),
        target_tokens_mean=n_tok / max(1, len(rows)),
        page_fraction=n_page / max(1, len(rows)),
        loss=loss,
        chunks=len(mine),
    )
    return torch.tensor(loss), metrics
