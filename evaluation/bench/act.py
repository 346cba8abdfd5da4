"""``dynaweb bench act``: what one acting decision costs, against a plain forward pass.

The policy scores every candidate action of a page (``PolicyRunner.act_info``: the prompt's
shared prefix into a KV cache, the candidates as one token trie).  Here the same start pages
(``bench dream``'s: every expert task's first page, cached) are acted on one at a time, as a
collector's context acts, and the same prompts are run through the backbone in one plain forward
pass each (no cache, no trie, logits at every position): the rate a forward pass reaches on these
cores.  Per backbone, side by side in one run:

* ``decisions_per_s``: acting decisions per second at batch 1;
* ``scored_tokens_per_s``: tokens acting runs through the model per second (prompt prefixes and
  trie nodes: ``PolicyRunner.stats["tokens"]``);
* ``forward_tokens_per_s``: prompt tokens per second of the plain forward pass;
* ``scored_over_forward``: the two rates' ratio (acting's overhead per token);
* ``profile``: the torch operators that took the most of acting's time (self CPU seconds, share).

Backbones: the configuration's own (``model.policy_path``: e.g. SmolLM2 with
``--config configs/smollm2.yaml``) and, when that is a pretrained model, the scratch GPT-Neo of
the same configuration without the path.
"""

from __future__ import annotations

import dataclasses
import os
import statistics
import time
from typing import Any

import torch

from core.config import Config, ModelConfig


def _backbones(model_cfg: ModelConfig) -> list[tuple[str, ModelConfig]]:
    scratch = dataclasses.replace(model_cfg, policy_path="", world_model_path="")
    if not model_cfg.policy_path:
        return [("scratch", scratch)]
    name = os.path.basename(model_cfg.policy_path.split(":")[-1]) or "pretrained"
    return [("scratch", scratch), (name, model_cfg)]


def _profile(runner: Any, obs: list, top: int = 12) -> list[dict]:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for o in obs:
            runner.act_info([o], [[]], temperature=1.0)
    ops = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
    total = sum(e.self_cpu_time_total for e in ops) or 1.0
    return [
        {
            "op": e.key,
            "calls": int(e.count),
            "self_s": round(e.self_cpu_time_total / 1e6, 3),
            "share": round(e.self_cpu_time_total / total, 3),
        }
        for e in ops[:top]
    ]


@torch.no_grad()
def bench_backbone(model_cfg: ModelConfig, pages: list, profile_pages: int = 4) -> dict:
    from models.lm.prompts import policy_prompt_ids
    from models.lm.saved import make_model
    from models.policy.model import Policy
    from models.policy.runner import PolicyRunner

    t_load = time.perf_counter()
    model, tok = make_model(Policy, model_cfg)
    load_s = time.perf_counter() - t_load
    runner = PolicyRunner(model, tok, model_cfg, seed=0)
    runner.act_info(pages[:1], [[]])  # warm-up
    before, n_cands = runner.stats["tokens"], []
    t0 = time.perf_counter()
    for o in pages:
        n_cands.append(runner.act_info([o], [[]], temperature=1.0)[0][3]["n_candidates"])
    act_s = time.perf_counter() - t0
    scored = runner.stats["tokens"] - before

    prompts = [policy_prompt_ids(tok, o, [], int(model_cfg.max_positions)) for o in pages]
    model(input_ids=torch.tensor([prompts[0]]))  # warm-up
    t0 = time.perf_counter()
    for p in prompts:
        model(input_ids=torch.tensor([p]))
    fwd_s = time.perf_counter() - t0
    fwd_tokens = sum(len(p) for p in prompts)
    scored_rate, fwd_rate = scored / act_s, fwd_tokens / fwd_s
    lm = model.lm.config
    return {
        "decisions_per_s": round(len(pages) / act_s, 3),
        "scored_tokens_per_s": round(scored_rate, 1),
        "forward_tokens_per_s": round(fwd_rate, 1),
        "scored_over_forward": round(scored_rate / fwd_rate, 3),
        "ms_per_decision": round(1000 * act_s / len(pages), 1),
        "scored_tokens_per_decision": round(scored / len(pages), 1),
        "prompt_tokens_median": statistics.median(len(p) for p in prompts),
        "candidates_median": statistics.median(n_cands),
        "parameters_m": round(sum(p.numel() for p in model.parameters()) / 1e6, 1),
        "architecture": f"{lm.model_type} {getattr(lm, 'num_hidden_layers', '?')} layers",
        "load_s": round(load_s, 2),
        "profile": _profile(runner, pages[:profile_pages]),
    }


def bench_act(cfg: Config, starts: list[dict], decisions: int = 32) -> dict:
    from core.spaces import Observation

    torch.set_num_threads(cfg.threads)
    pages = [Observation.from_dict(s["obs"]) for s in starts][: max(1, decisions)]
    by = {name: bench_backbone(mc, pages) for name, mc in _backbones(cfg.model)}
    name = list(by)[-1]  # the configuration's own backbone
    own = by[name]
    return {
        "backbone": name,
        **{k: own[k] for k in ("decisions_per_s", "scored_tokens_per_s", "forward_tokens_per_s")},
        "scored_over_forward": own["scored_over_forward"],
        "by_backbone": by,
        "decisions": len(pages),
        "threads": cfg.threads,
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }


def main(args: Any, cfg: Config) -> int:
    from evaluation.bench.train import _print, start_states

    starts = start_states(cfg, getattr(args, "starts", None))
    res = bench_act(cfg, starts, int(getattr(args, "decisions", None) or 32))
    if not args.json:
        for name, r in res["by_backbone"].items():
            print(f"{name}: where acting's time goes (torch operators, self CPU)")
            for row in r["profile"]:
                print(
                    f"  {row['share']:6.1%} {row['self_s']:8.3f} s {row['calls']:6d}  {row['op']}"
                )
    _print(res, args.json, "acting: decisions and scored tokens against a plain forward pass")
    return 0
