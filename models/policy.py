"""The policy: a Hugging Face causal LM with decoding constrained to valid actions.

``make_policy(model_cfg)`` builds GPT-Neo from ``ModelConfig`` (layers, d_model,
heads, max_positions; all dropout 0 so behaviour and training log-probs agree)
with the byte tokenizer, or loads ``model_cfg.policy_path`` (a local HF dir).

Acting (``PolicyRunner.act``): for every observation the valid actions are
enumerated (``candidate_actions``), every candidate's tokens (action text + eos)
are scored as a continuation of the prompt, and one candidate is drawn from
``softmax(score / temperature)`` (or the argmax).  Scoring is batched: the
prompts of all observations run once (left padded) into a KV cache; then all
candidates of an observation are *packed* into one row after its prompt, with a
4D attention mask (each candidate sees the prompt and its own earlier tokens) and
position ids that restart at the prompt length, so the cache is shared, never
copied.  Rows that do not fit ``max_positions`` are split into rounds (the cache
is cropped back to the prompt between rounds).

The recorded behaviour log-probability is the *unconstrained* sequence
log-probability: the sum over the action's tokens (text + eos) of log softmax
over the whole vocabulary at temperature 1, dropout off (``model.eval()``); it is
what ``models.learner`` recomputes for the GSPO ratio.  The sampling
distribution (renormalised over candidates, tempered) is not what is recorded.
"""

from __future__ import annotations

import json
import re
from typing import Any

import torch

from collectors.spaces import Action, Observation
from models.prompts import action_ids, policy_prompt_ids
from models.tokenizer import build_tokenizer, load_tokenizer, pad_id

TYPEABLE = ("textbox", "searchbox", "textarea", "input", "combobox", "spinbutton", "searchfield")
SELECTABLE = ("combobox", "listbox", "select", "menulist")
MAX_CANDIDATES = 128
MAX_TEXTS = 8
_LINE = re.compile(r"^(\s*)\[(\d+)\]\s*(\S*)\s*(.*)$")
_QUOTED = re.compile(r'"((?:[^"\\]|\\.)*)"')


def gpt_neo_config(model_cfg: Any, tokenizer: Any) -> Any:
    from transformers import GPTNeoConfig

    return GPTNeoConfig(
        vocab_size=len(tokenizer), max_position_embeddings=model_cfg.max_positions,
        hidden_size=model_cfg.d_model, num_layers=model_cfg.layers, num_heads=model_cfg.heads,
        attention_types=[[["global"], model_cfg.layers]], intermediate_size=4 * model_cfg.d_model,
        activation_function="gelu",  # exact erf GELU: one fused op (gelu_new is 4 memory-bound ops)
        embed_dropout=0.0, attention_dropout=0.0, resid_dropout=0.0,
        bos_token_id=tokenizer.eos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=pad_id(tokenizer), tie_word_embeddings=True,
    )  # fmt: skip


def _sdpa_attn(self: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attention_mask=None):
    """GPT-Neo attention via fused ``scaled_dot_product_attention`` (same maths as eager:
    no 1/sqrt(d) scale, the layer's causal/local ``bias`` AND the additive mask)."""
    q_len, k_len = query.size(-2), key.size(-2)
    query, key, value = query.float(), key.float(), value.float()
    bias = self.bias[:, :, k_len - q_len : k_len, :k_len]
    neg = torch.finfo(torch.float32).min
    mask = torch.zeros((), dtype=torch.float32, device=query.device).masked_fill(~bias, neg) if attention_mask is None \
        else attention_mask.float().masked_fill(~bias, neg)  # fmt: skip
    p = self.attn_dropout.p if self.training else 0.0
    out = torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=mask, dropout_p=p, scale=1.0)
    return out, None


def fuse_attention(model: Any) -> Any:
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


def load_causal_lm(path: str) -> tuple[Any, Any]:
    """(model, tokenizer) from a local Hugging Face directory (no hub), in eval mode."""
    from transformers import AutoModelForCausalLM

    tok = load_tokenizer(path)
    model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True)
    fuse_attention(model)
    model.eval()
    return model, tok


def make_causal_lm(model_cfg: Any, path: str = "") -> tuple[Any, Any]:
    """(model, tokenizer): from a local HF directory, or GPT-Neo from config (seeded)."""
    from transformers import GPTNeoForCausalLM

    if path:
        return load_causal_lm(path)
    else:
        tok = build_tokenizer()
        torch.manual_seed(model_cfg.seed)
        model = GPTNeoForCausalLM(gpt_neo_config(model_cfg, tok))
    fuse_attention(model)
    model.eval()
    return model, tok


def make_policy(model_cfg: Any) -> tuple[Any, Any]:
    """(model, tokenizer) from ``model_cfg.policy_path`` or from config."""
    return make_causal_lm(model_cfg, model_cfg.policy_path)


def load_policy(path: str) -> tuple[Any, Any]:
    """A saved policy (``save_pretrained`` of model and tokenizer in one directory)."""
    return load_causal_lm(path)


# --- candidate actions -----------------------------------------------------------


def parse_tree(tree: str) -> list[dict]:
    """Tree lines -> [{id, depth, role, name, line_no}] (lines without an id skipped)."""
    out = []
    for n, line in enumerate(tree.split("\n")):
        m = _LINE.match(line)
        if not m:
            continue
        name = ""
        q = _QUOTED.search(m.group(4))
        if q:
            try:
                name = json.loads(f'"{q.group(1)}"')
            except json.JSONDecodeError:
                name = q.group(1)
        out.append({"id": int(m.group(2)), "depth": len(m.group(1)) // 2,
                    "role": m.group(3).lower(), "name": name, "line_no": n})  # fmt: skip
    return out


def instruction_texts(instruction: str, limit: int = MAX_TEXTS) -> list[str]:
    """Texts the task may want typed: quoted spans, then words after enter/type/... ."""
    found: list[str] = []
    for pat in (r'"([^"]+)"', r"“([^”]+)”", r"(?<![A-Za-z])'([^']+)'(?![A-Za-z])"):
        found += re.findall(pat, instruction)
    kw = r"\b(?:enter|type|write|input|search for|fill in|fill)\s+(?:the\s+(?:text|word|value)\s+)?"
    for m in re.finditer(kw + r"([^\s\"'“”.,;:!?]+(?:\s+[^\s\"'“”.,;:!?]+)*)", instruction, re.I):
        words = m.group(1).split()
        stop = next((i for i, w in enumerate(words)
                     if w.lower() in ("in", "into", "on", "to", "and", "then", "as")), len(words))  # fmt: skip
        if not words or words[0].lower() in ("the", "a", "an", "your", "it", "this"):
            continue
        found.append(words[0])
        if 1 < stop <= 4:
            found.append(" ".join(words[:stop]))
    # "from: Cincinnati, OH to: LEX on 10/16/2016." -> "Cincinnati, OH", "LEX"; dates/numbers
    for m in re.finditer(r"\b\w+:\s*([^:\"]+?)(?=\s+\w+:|\s+on\s|[.;!?]\s*$|$)", instruction):
        found.append(m.group(1).strip().rstrip(".,"))
    found += re.findall(r"\b\d{1,4}[/.-]\d{1,2}[/.-]\d{1,4}\b", instruction)
    out: list[str] = []
    for t in found:
        t = t.strip()
        if t and t not in out and len(t) <= 120:
            out.append(t)
    return out[:limit]


def candidate_actions(obs: Observation, max_candidates: int = MAX_CANDIDATES) -> list[Action]:
    """Valid actions for ``obs`` (deterministic order, de-duplicated, capped)."""
    nodes = parse_tree(obs.tree)
    texts = instruction_texts(obs.instruction)
    cands: list[Action] = []
    for i, nd in enumerate(nodes):
        if any(r in nd["role"] for r in TYPEABLE):
            cands += [Action.type(nd["id"], t) for t in texts]
        if any(r == nd["role"] for r in SELECTABLE):
            for sub in nodes[i + 1 :]:
                if sub["depth"] <= nd["depth"]:
                    break
                if sub["role"] == "option" and sub["name"]:
                    cands.append(Action.select(nd["id"], sub["name"]))
    cands += [Action.press("Enter"), Action.stop("")]
    cands += [Action.click(nd["id"]) for nd in nodes]
    cands += [Action.scroll("down"), Action.scroll("up")]
    seen: set = set()
    out = []
    for a in cands:
        t = a.to_text()
        if t not in seen:
            seen.add(t)
            out.append(a)
    return out[:max_candidates]


# --- batched scoring ---------------------------------------------------------------


@torch.no_grad()
def score_continuations(
    model: Any, prompts: list[list[int]], conts: list[list[list[int]]], max_positions: int, pad: int
) -> list[torch.Tensor]:
    """Summed log-probs of each continuation given its prompt (see module doc).

    ``prompts[b]``: token ids; ``conts[b][c]``: ids of candidate c (>= 1 token).
    Returns one float tensor (len(conts[b]),) per prompt.
    """
    model.eval()
    B = len(prompts)
    P = max(len(p) for p in prompts)
    dev = next(model.parameters()).device
    neg = torch.finfo(torch.float32).min
    ids = torch.full((B, P), pad, dtype=torch.long)
    keep = torch.zeros(B, P, dtype=torch.bool)
    for b, p in enumerate(prompts):
        ids[b, P - len(p) :] = torch.tensor(p)
        keep[b, P - len(p) :] = True
    pos = (keep.long().cumsum(-1) - 1).clamp(min=0)
    causal = torch.ones(P, P, dtype=torch.bool).tril()
    allowed = causal[None] & keep[:, None, :]
    allowed |= torch.eye(P, dtype=torch.bool)[None]  # pad rows see themselves: no NaN
    mask = torch.where(allowed, 0.0, neg)[:, None]
    out = model(input_ids=ids.to(dev), attention_mask=mask.to(dev), position_ids=pos.to(dev), use_cache=True)
    cache = out.past_key_values
    first = torch.log_softmax(out.logits[:, -1].float(), -1).cpu()
    scores = [torch.tensor([float(first[b, c[0]]) for c in conts[b]]) for b in range(B)]
    room = max(1, max_positions - P)
    plans = []  # per prompt: list of rounds, each a list of candidate indices
    for b in range(B):
        rounds, cur, used = [], [], 0
        for c, toks in enumerate(conts[b]):
            need = len(toks) - 1
            if need == 0:
                continue
            if cur and used + need > room:
                rounds.append(cur)
                cur, used = [], 0
            cur.append(c)
            used += need
        if cur:
            rounds.append(cur)
        plans.append(rounds)
    for r in range(max((len(p) for p in plans), default=0)):
        rows = []
        for b in range(B):
            inp, lab, seg, off = [], [], [], []
            for c in plans[b][r] if r < len(plans[b]) else []:
                t = conts[b][c]
                inp += t[:-1]
                lab += t[1:]
                seg += [c] * (len(t) - 1)
                off += list(range(len(t) - 1))
            rows.append((inp, lab, seg, off))
        Q = max(1, max(len(x[0]) for x in rows))
        q_ids = torch.full((B, Q), pad, dtype=torch.long)
        q_lab = torch.zeros(B, Q, dtype=torch.long)
        q_seg = torch.full((B, Q), -1, dtype=torch.long)
        q_off = torch.zeros(B, Q, dtype=torch.long)
        for b, (inp, lab, seg, off) in enumerate(rows):
            n = len(inp)
            if n:
                q_ids[b, :n] = torch.tensor(inp)
                q_lab[b, :n] = torch.tensor(lab)
                q_seg[b, :n] = torch.tensor(seg)
                q_off[b, :n] = torch.tensor(off)
        q_pos = keep.sum(-1, keepdim=True) + q_off
        real = q_seg >= 0
        own = (q_seg[:, :, None] == q_seg[:, None, :]) & (q_off[:, None, :] <= q_off[:, :, None])
        own &= real[:, :, None]
        own |= torch.eye(Q, dtype=torch.bool)[None]
        to_prompt = keep[:, None, :] & real[:, :, None]
        allowed = torch.cat([to_prompt.expand(B, Q, P), own], dim=-1)
        mask = torch.where(allowed, 0.0, neg)[:, None]
        o = model(input_ids=q_ids.to(dev), attention_mask=mask.to(dev), position_ids=q_pos.to(dev),
                  past_key_values=cache, use_cache=True)  # fmt: skip
        lp = torch.log_softmax(o.logits.float(), -1).gather(-1, q_lab.to(dev)[..., None])[..., 0].cpu()
        for b in range(B):
            sel = real[b]
            if sel.any():
                scores[b].index_add_(0, q_seg[b][sel], lp[b][sel])
        cache.crop(-Q)  # drop this round's candidate keys, keep the prompt
    return scores


class PolicyRunner:
    """Batched constrained acting.  ``policy_version`` is set by the checkpoint loader."""

    def __init__(self, model: Any, tokenizer: Any, cfg: Any, max_candidates: int = MAX_CANDIDATES,
                 policy_version: int = 0, seed: int | None = None):  # fmt: skip
        self.model = model
        self.tokenizer = tokenizer
        self.cfg = cfg
        self.max_positions = int(getattr(cfg, "max_positions", 1024))
        self.max_candidates = max_candidates
        self.policy_version = policy_version
        self.generator = torch.Generator()
        self.generator.manual_seed(getattr(cfg, "seed", 0) if seed is None else seed)

    def act(
        self, observations: list[Observation], histories: list[list[str]],
        temperature: float = 1.0, greedy: bool = False,
    ) -> list[tuple[Action, float, int]]:  # fmt: skip
        """One action per observation: (Action, behaviour logprob, action token count)."""
        assert len(observations) == len(histories), (len(observations), len(histories))
        if not observations:
            return []
        # identical (observation, history) inputs -- e.g. the G rollouts of a group at
        # their first step -- are scored once and sampled independently
        keys: dict[tuple, int] = {}
        which, prompts, cands, cand_ids = [], [], [], []
        for obs, hist in zip(observations, histories, strict=True):
            p = policy_prompt_ids(self.tokenizer, obs, hist, self.max_positions)
            key = (tuple(p), obs.tree, obs.instruction)
            if key not in keys:
                keys[key] = len(prompts)
                room = self.max_positions - len(p)
                acts = [a for a in candidate_actions(obs, self.max_candidates)
                        if len(action_ids(self.tokenizer, a.to_text())) <= room]  # fmt: skip
                if not acts:
                    acts = [Action.stop("")]
                prompts.append(p)
                cands.append(acts)
                cand_ids.append([action_ids(self.tokenizer, a.to_text()) for a in acts])
            which.append(keys[key])
        scores = score_continuations(self.model, prompts, cand_ids, self.max_positions, pad_id(self.tokenizer))
        out = []
        for u in which:
            acts, ids, s = cands[u], cand_ids[u], scores[u]
            if greedy or temperature <= 0:
                k = int(torch.argmax(s))
            else:
                probs = torch.softmax(s / temperature, -1)
                k = int(torch.multinomial(probs, 1, generator=self.generator))
            out.append((acts[k], float(s[k]), len(ids[k])))
        return out
