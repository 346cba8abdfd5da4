"""Token log-probs of continuations given prompts, the shared backbone's scoring: two engines
over the same inputs.

Both feed each prompt causally and its continuations as a *token trie*: the node for the prefix
``c[:j+1]`` of a continuation carries ``c[j]``, sees the prompt and its own ancestors (a tree
attention mask) and has position id = prompt length + ``j``, so every distinct prefix (``click(1``
of ``click(1)`` and ``click(12)``; on the start pages of the expert tasks, 11 candidates per page
on average, 1.7x fewer candidate tokens than one segment per candidate) is computed once.

* ``score_continuations`` -- the cached engine (acting, the world model's reranking; no grad):
  prompts with a common prefix of at least ``MIN_SHARED`` tokens (the same page under different
  histories, pages of one site) run that prefix once into a KV cache (``prefix_groups``); then
  each member's own prompt tail and all its candidates go in as one trie (``_trie_rounds``),
  the cache shared, never copied.  Tries that do not fit ``max_positions`` are split into rounds
  (the cache is cropped back to the prefix between rounds).  Returns summed log-probs.
* ``continuation_logprobs`` -- the batched engine (the learner; with grad): rows sharing a
  prompt are packed into one padded row of the prompt and their trie (``_pack``, ``_trie_row``),
  and the rows run a batch at a time with a 4D mask.  Returns each continuation's token log-probs.

The scores equal those of scoring every continuation alone, up to float rounding; what the policy
makes of them (``log pi_T(a|s)``) is ``models.policy.log_pi``.
"""

from __future__ import annotations

import torch

from models.lm.base import LanguageModel
from models.losses import token_logprobs

MIN_SHARED = 32  # prompts sharing at least this many leading tokens share one prefix pass


def prefix_groups(
    prompts: list[list[int]], min_shared: int = MIN_SHARED
) -> list[tuple[int, list[int]]]:
    """Prompts -> ``[(prefix length L, member indices)]``.

    Prompts whose common prefix has at least ``min_shared`` tokens form one group
    (the pages of a dream group's rollouts, the same page under different
    histories); ``L`` is that common prefix, at most ``len(shortest) - 1``, so
    every member keeps at least one token of its own.  Deterministic.
    """
    import os.path

    groups: list[tuple[int, list[int]]] = []
    for i in sorted(range(len(prompts)), key=lambda k: prompts[k]):
        p = prompts[i]
        if groups:
            L, mem = groups[-1]
            shared = min(L, len(os.path.commonprefix([prompts[mem[-1]], p])), len(p) - 1)
            if shared >= min_shared:
                groups[-1] = (shared, mem + [i])
                continue
        groups.append((max(0, len(p) - 1), [i]))
    return groups


def _trie_rounds(
    seqs: list[list[int]], starts: list[int], room: int, report: frozenset[int] = frozenset()
) -> list[tuple[list[int], list[int], list[tuple], list[tuple[int, int]], list[tuple]]]:
    """Sequences -> rounds of (node tokens, node parents, labels, origins, at) within ``room`` nodes.

    The nodes of a round are the distinct proper prefixes of its sequences (the
    node for prefix ``s[:i+1]`` carries token ``s[i]``; parents precede children);
    ``labels`` lists (sequence, node predicting the token, token) for every token
    of sequence ``k`` from index ``starts[k] >= 1`` on; ``origins`` gives each node's
    (first sequence, index) it stands for; ``at`` lists (sequence, index, node) for
    the tokens before ``starts[k]`` of each sequence ``k`` in ``report``.  A sequence
    that does not fit a round with others starts a new one (and brings its own prefix nodes).
    """
    rounds, nodes, toks, parents, labels, origins, at = [], {}, [], [], [], [], []
    for k, t in enumerate(seqs):
        new = sum(1 for i in range(len(t) - 1) if tuple(t[: i + 1]) not in nodes)
        if toks and len(toks) + new > room:
            rounds.append((toks, parents, labels, origins, at))
            nodes, toks, parents, labels, origins, at = {}, [], [], [], [], []
        for i in range(len(t) - 1):
            key = tuple(t[: i + 1])
            if key not in nodes:
                nodes[key] = len(toks)
                toks.append(t[i])
                parents.append(nodes[key[:-1]] if i else -1)
                origins.append((k, i))
            if i + 1 >= starts[k]:
                labels.append((k, nodes[key], t[i + 1]))
            if i < starts[k] and k in report:
                at.append((k, i, nodes[key]))
    if toks:
        rounds.append((toks, parents, labels, origins, at))
    return rounds


def _tree_mask(parents: list[int], prefix: int, neg: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(additive mask (1, 1, Q, prefix + Q), depth (Q,)): a node sees the prefix and its ancestors."""
    Q = len(parents)
    chains: list[list[int]] = []
    rows, cols = [], []
    for i, par in enumerate(parents):
        ch = (chains[par] if par >= 0 else []) + [i]
        chains.append(ch)
        rows += [i] * len(ch)
        cols += ch
    allowed = torch.zeros(Q, prefix + Q, dtype=torch.bool)
    allowed[:, :prefix] = True
    allowed[rows, [prefix + c for c in cols]] = True
    depth = torch.tensor([len(ch) - 1 for ch in chains], dtype=torch.long)
    return torch.where(allowed, 0.0, neg)[None, None], depth


@torch.no_grad()
def score_continuations(
    model: LanguageModel,
    prompts: list[list[int]],
    conts: list[list[list[int]]],
    max_positions: int,
    pad: int,
    stats: dict | None = None,
    states: list | None = None,
) -> list[torch.Tensor]:
    """The cached engine: summed log-probs of each continuation given its prompt (no grad).

    ``prompts[b]``: token ids; ``conts[b][c]``: ids of candidate c (>= 1 token).
    Returns one float tensor (len(conts[b]),) per prompt.

    Per ``prefix_groups`` group: one forward pass of the shared prefix into a KV
    cache, then the members' own prompt tails *and* their candidates go in as one
    token trie (``_trie_rounds``; shared tails and candidate prefixes computed once)
    with a tree mask and position ids = prefix length + depth; rounds that do not
    fit ``max_positions`` crop the cache back to the prefix.  ``pad`` is unused
    (no padding is needed).  ``stats["tokens"]`` (if given) is increased by the
    tokens run through the model (prefixes + trie nodes).  ``states`` (a list of
    ``len(prompts)``, if given) receives each prompt's last-layer hidden states,
    (len(prompt), d), read from these same passes (the element pointer's input: no
    extra forward).
    """
    model.eval()
    dev = next(model.parameters()).device
    neg = torch.finfo(torch.float32).min
    scores = [torch.zeros(len(c)) for c in conts]
    used = 0
    flags = model.prompt_flags(prompts)  # the world model's match feature (None: none)
    want = states is not None
    for L, members in prefix_groups(prompts):
        seqs, starts, owner, first = [], [], [], set()
        for m in members:
            tail = prompts[m][L:]
            if conts[m]:
                first.add(len(seqs))
            for c, toks in enumerate(conts[m]):
                seqs.append(tail + list(toks))
                starts.append(len(tail))
                owner.append((m, c))
        flat = torch.zeros(len(seqs))
        cache = None
        if L:
            given = None if flags is None else torch.tensor([flags[members[0]][:L]])
            out = model(
                match_flags=given,
                input_ids=torch.tensor([prompts[members[0]][:L]], device=dev),
                use_cache=True,
                output_hidden_states=want,
            )
            cache = out.past_key_values
            used += L
        rows: dict[int, list] = {m: [] for m in members}  # each prompt's tail states
        report = frozenset(first) if want else frozenset()
        rounds = _trie_rounds(seqs, starts, max(1, max_positions - L), report)
        for toks, parents, labels, origins, at in rounds:
            mask, depth = _tree_mask(parents, L, neg)
            given = None
            if flags is not None:  # a prompt token's flag; the continuation's are never set
                f = [i < starts[k] and flags[owner[k][0]][L + i] for k, i in origins]
                given = torch.tensor([f], dtype=torch.bool)
            o = model(
                match_flags=given,
                input_ids=torch.tensor([toks], device=dev),
                attention_mask=mask.to(dev),
                position_ids=(L + depth)[None].to(dev),
                past_key_values=cache,
                use_cache=True,
                output_hidden_states=want,
            )
            if at:  # the prompt tails' states, in order of position (parents precede children)
                h = o.hidden_states[-1][0]
                for k, _, node in at:
                    rows[owner[k][0]].append(h[node])
            lsm = torch.log_softmax(o.logits[0].float(), -1).cpu()
            lab = torch.tensor(labels)  # (k, 3): sequence, node, token
            flat.index_add_(0, lab[:, 0], lsm[lab[:, 1], lab[:, 2]])
            used += len(toks)
            cache = o.past_key_values
            if L:
                cache.crop(-len(toks))  # keep the prefix only
            else:
                cache = None
        for k, (m, c) in enumerate(owner):
            scores[m][c] = flat[k]
        if want:
            head = [out.hidden_states[-1][0, :L]] if L else []
            for m in members:  # (a prompt without candidates has no tail nodes: None)
                states[m] = torch.cat([*head, torch.stack(rows[m])]) if rows[m] else None
    if stats is not None:
        stats["tokens"] = stats.get("tokens", 0) + used
    return scores


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


def _long_prompt(
    model: LanguageModel,
    prompt: list[int],
    idx: list[int],
    rows: list[tuple[list[int], list[int]]],
    max_pos: int,
    out: list,
    hidden: dict[int, torch.Tensor] | None,
    neg: float,
) -> None:
    """``continuation_logprobs`` for the rows ``idx`` sharing the long ``prompt``: the prompt once
    into a KV cache (with grad), then the continuations' proper prefixes as token-trie rounds of
    at most ``max_pos - len(prompt)`` nodes against it (``_trie_rounds``, ``_tree_mask``; position
    ids = prompt length + depth), the cache cropped back to the prompt between rounds.  Each
    continuation's first token is read at the prompt's last position, the others at their
    prefix's node: the numbers of the packed row, up to float rounding."""
    dev = next(model.parameters()).device
    L = len(prompt)
    o = model.base(torch.tensor([prompt], device=dev), use_cache=True)
    states, cache = o.last_hidden_state[0], o.past_key_values
    if hidden is not None:
        for i in idx:
            hidden[i] = states
    conts = [rows[i][1] for i in idx]
    first = token_logprobs(
        model.logits_at(states[L - 1 :].expand(len(conts), -1))[:, None],
        torch.tensor([[c[0]] for c in conts], device=dev),
    )[:, 0]
    rest: list[list[torch.Tensor]] = [[] for _ in conts]
    for toks, parents, labels, _origins, _at in _trie_rounds(
        conts, [1] * len(conts), max(1, max_pos - L)
    ):
        mask, depth = _tree_mask(parents, L, neg)
        h = model.base(
            torch.tensor([toks], device=dev),
            match_flags=torch.zeros(1, len(toks), dtype=torch.bool),  # continuations: never
            attention_mask=mask.to(dev),
            position_ids=(L + depth)[None].to(dev),
            past_key_values=cache,
            use_cache=True,
        ).last_hidden_state[0]
        lab = torch.tensor(labels)  # (k, 3): continuation, node, token
        lp = token_logprobs(model.logits_at(h[lab[:, 1].to(dev)])[None], lab[None, :, 2].to(dev))[0]
        for (k, _, _), v in zip(labels, lp, strict=True):
            rest[k].append(v)
        cache.crop(L)  # keep the prompt only
    for n, i in enumerate(idx):
        out[i] = torch.stack([first[n], *rest[n]])


def _trie_row(
    prompt: list[int], conts: list[list[int]]
) -> tuple[list[int], list[int], list[list[int]], list]:
    """One packed row: the prompt, then the continuations as a token trie.

    Returns (tokens, position ids, the visible positions of each trie node -- the prompt
    is seen causally --, per continuation the positions predicting each of its tokens).
    The node for prefix ``c[:j+1]`` carries ``c[j]`` at position id ``len(prompt) + j``
    and sees the prompt and its ancestors, so every distinct prefix (``click(1``,
    ``type(6, "``) is computed once, as in ``score_continuations``.
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


def continuation_logprobs(
    model: LanguageModel,
    rows: list[tuple[list[int], list[int]]],
    pad: int,
    rows_per_forward: int = 16,
    hidden: dict[int, torch.Tensor] | None = None,
    max_pos: int | None = None,
) -> list[torch.Tensor]:
    """The batched engine: token log-probs of each row's continuation given its prompt (with grad).

    ``rows``: (prompt_ids, continuation_ids).  Rows with the same prompt (all the
    candidates of a step, the G rollouts of a group at their first step, repeated
    pages) share one forward row: the prompt, then their continuations as a token
    trie (``_trie_row``: shared prefixes computed once) with a 4D tree mask and
    position ids = prompt length + depth -- the inputs ``score_continuations`` scores.
    Packed rows are sorted by length and run ``rows_per_forward`` at a time (little
    padding; ``pad``: the padding id).  Runs in eval mode (dropout off) and restores the previous
    mode.  ``hidden`` (a dict): filled with each row's prompt's last-layer states, (len(prompt), d),
    read from the same forward.  ``max_pos``: the longest row (default the model's positions).
    A prompt whose continuations' tokens do not fit one row beside it (a long page) runs once into
    a KV cache, with grad, and its continuations' trie goes in rounds against that cache, as the
    cached engine does (``_long_prompt``), instead of a row per continuation, each repeating it.
    """
    if max_pos is None:
        max_pos = int(getattr(model.config, "max_position_embeddings", 1 << 30))
    packed, long = [], []
    for p, idx in _pack(rows, max_pos):
        (long if len(p) + sum(len(rows[i][1]) for i in idx) > max_pos else packed).append((p, idx))
    packed.sort(key=lambda x: len(x[0]) + sum(len(rows[i][1]) for i in x[1]))
    out: list[torch.Tensor | None] = [None] * len(rows)
    dev = next(model.parameters()).device
    neg = torch.finfo(torch.float32).min
    was_training = model.training
    model.eval()
    try:
        # a prompt whose candidates do not fit one row beside it (a long page: a row per candidate
        # would repeat the prompt for each): the prompt once into a cache, the candidates' trie in
        # rounds against it
        for p in {tuple(p) for p, _ in long}:
            idx = [i for q, ix in long if tuple(q) == p for i in ix]
            _long_prompt(model, list(p), idx, rows, max_pos, out, hidden, neg)
        for c0 in range(0, len(packed), rows_per_forward):
            chunk = packed[c0 : c0 + rows_per_forward]
            built = [_trie_row(p, [rows[i][1] for i in idx]) for p, idx in chunk]
            T = max(len(b[0]) for b in built)
            ids = torch.full((len(built), T), pad, dtype=torch.long)
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
