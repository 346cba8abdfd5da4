"""``dynaweb bench wm-decode``: what a trained world model's decoding costs per dream step.

A trained world model (``--world-model DIR``: a Hugging Face directory such as
``dynaweb experiment world-model``'s ``OUT/world_model`` or the sample-efficiency study's
pretrained one) predicts the next page of real (page, action) pairs (``--data``: real
transitions, default the committed held-out set) in batches of 16, greedy, side by side in one
run:

- ``head_first``: ``decode="head"`` as dreams run it: the change head picks from one forward pass
  and text is generated only for the rows it leaves to the text (``other``);
- ``text_then_head``: the same decode with every row's text generated first (before
  ``head_first`` existed; ``evaluation.bench.runners.TextThenHeadRunner``);
- ``greedy``: the generated text alone.

Figures: predictions per second of each, the speed-up of ``head_first`` over ``text_then_head``,
the share of its rows that generated text, and that both head decodes predict the same pages
(``same_pages``: must be 1.0).
"""

from __future__ import annotations

import os
import time
from typing import Any

import torch

from core.config import Config

DEFAULT_DATA = "docs/results/world-model/heldout.jsonl.gz"


def bench_wm_decode(cfg: Config, wm_dir: str, transitions: list, n: int = 256) -> dict:
    from core.spaces import Observation
    from models.checkpoints.store import wm_init_dir
    from models.lm.saved import load_model
    from models.world_model.heads import try_parse_action
    from models.world_model.model import WorldModel
    from models.world_model.proposals import choose
    from models.world_model.runner import WorldModelRunner

    from .runners import TextThenHeadRunner

    torch.set_num_threads(cfg.threads)
    model, tok = load_model(WorldModel, str(wm_init_dir(wm_dir)))
    if not model.change_head_trained():
        raise ValueError(f"{wm_dir}: the change head is not trained (decode 'head' needs it)")
    rows = transitions[:n]
    obs = [Observation.from_dict(t.obs) for t in rows]
    acts = [t.action for t in rows]
    runners = {
        "head_first": WorldModelRunner(model, tok, cfg.dream, cfg.model.max_positions),
        "text_then_head": TextThenHeadRunner(model, tok, cfg.dream, cfg.model.max_positions),
        "greedy": WorldModelRunner(model, tok, cfg.dream, cfg.model.max_positions),
    }

    def timed(mode: str) -> tuple[float, list[str]]:
        runner = runners[mode]
        runner.decode = "greedy" if mode == "greedy" else "head"
        runner.predict(obs[:16], acts[:16])  # warm-up
        t0, trees = time.perf_counter(), []
        for i in range(0, len(rows), 16):
            trees += [p.next_obs.tree for p in runner.predict(obs[i : i + 16], acts[i : i + 16])]
        return len(rows) / (time.perf_counter() - t0), trees

    res: dict[str, Any] = {}
    trees: dict[str, list[str]] = {}
    for mode in ("head_first", "text_then_head", "greedy"):
        res[f"{mode}_steps_per_s"], trees[mode] = timed(mode)
    runner = runners["head_first"]
    prompts = [runner.prompt_ids(o, a) for o, a in zip(obs, acts, strict=True)]
    with torch.no_grad():
        change = model.head_logits(runner.prefill_head_input(prompts))[2].float()
    picks = choose(change, obs, [try_parse_action(a) for a in acts])
    real = [t.next_obs["tree"] for t in rows]
    return {
        **{k: round(v, 2) for k, v in res.items()},
        "head_first_over_text_then_head": round(
            res["head_first_steps_per_s"] / res["text_then_head_steps_per_s"], 2
        ),
        "text_rows_share": round(sum(p is None for p in picks) / len(picks), 3),
        "same_pages": round(
            sum(a == b for a, b in zip(trees["head_first"], trees["text_then_head"], strict=True))
            / len(rows),
            4,
        ),
        "exact_match": {
            m: round(sum(a == b for a, b in zip(trees[m], real, strict=True)) / len(rows), 4)
            for m in trees
        },
        "pairs": len(rows),
        "batch": 16,
        "threads": cfg.threads,
        "model": f"{model.config.num_layers}x{model.config.hidden_size}",
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }


def main(args: Any, cfg: Config) -> int:
    from evaluation.bench.train import _print
    from evaluation.eval.sources import read_jsonl
    from evaluation.studies.sample_efficiency.wm import corpus_path

    wm = getattr(args, "world_model", None)
    if not wm:
        raise ValueError(
            "bench wm-decode needs --world-model DIR (a trained world model: `dynaweb experiment "
            "world-model --out DIR` writes DIR/world_model)"
        )
    data = read_jsonl(str(corpus_path(getattr(args, "data", None) or DEFAULT_DATA, "--data")))
    res = bench_wm_decode(cfg, wm, data, int(getattr(args, "pairs", None) or 256))
    _print(res, args.json, "world-model decoding per dream step (trained model, CPU)")
    return 0
