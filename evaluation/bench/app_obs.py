"""Observation size on app pages: tokens per observation before and after pruning and truncation.

    python -m evaluation.bench.app_obs --tasks 'shop/*' --seeds 0:3 [--json]

Runs each task's expert (``AppTask.expert``) in a live browser and, at every observation,
counts the project's BPE tokens (``models.lm.tokenizer``, ``model.tokenizer="bpe"``) of the page
tree as the page is, unpruned and untruncated (``render_lines`` of every line), pruned
(``collectors.webapps.prune``) but untruncated, and as the agent sees it (pruned, then truncated
to the task's budget in those tokens: ``collector.app_obs_tokens``).  Prints median and p95 of
each, the share of observations the truncation touched, and the same per task kind.  The JSON
summary is the last line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
from collections import defaultdict


def _pct(xs: list[int], q: float) -> float | None:
    if not xs:
        return None
    s = sorted(xs)
    return float(s[min(len(s) - 1, int(round(q * (len(s) - 1))))])


async def _collect(tasks: list[str], seeds: list[int]) -> list[dict]:
    from collectors.browser import Browser
    from collectors.env import WebEnv
    from collectors.observation import render_lines
    from collectors.tasks import get_task
    from collectors.webapps.prune import prune_lines

    rows: list[dict] = []
    async with Browser() as browser:
        env = WebEnv(browser, "http://127.0.0.1:9/")
        await env.open()
        try:
            for task in tasks:
                spec = get_task(task)
                expert, kind = spec.app_task.expert, spec.app_task.kind
                for seed in seeds:
                    obs, _ = await env.reset(task, seed)
                    history: list = []
                    for _ in range(spec.app_task.max_steps):
                        st = env.state
                        rows.append(
                            {
                                "task": task,
                                "kind": kind,
                                "raw": render_lines(st.lines),
                                "pruned": render_lines(prune_lines(st.lines)),
                                "seen": obs.tree,
                                "truncated": bool(st.trunc.get("truncated")),
                            }
                        )
                        a = expert.act(obs, history)
                        nobs, _, term, trunc, _ = await env.step(a)
                        history.append((obs, a))
                        obs = nobs
                        if term or trunc:
                            break
        finally:
            await env.close()
    return rows


def summarize(rows: list[dict], count) -> dict:
    raw = count([r["raw"] for r in rows])
    pruned = count([r["pruned"] for r in rows])
    seen = count([r["seen"] for r in rows])
    out = {
        "observations": len(rows),
        "tokens_raw_p50": _pct(raw, 0.5),
        "tokens_raw_p95": _pct(raw, 0.95),
        "tokens_pruned_p50": _pct(pruned, 0.5),
        "tokens_pruned_p95": _pct(pruned, 0.95),
        "tokens_seen_p50": _pct(seen, 0.5),
        "tokens_seen_p95": _pct(seen, 0.95),
        "tokens_seen_max": max(seen, default=None),
        "truncated_share": round(sum(r["truncated"] for r in rows) / max(1, len(rows)), 3),
        "by_kind": {},
    }
    by: dict = defaultdict(list)
    for i, r in enumerate(rows):
        by[r["kind"]].append(i)
    for kind, idx in sorted(by.items()):
        out["by_kind"][kind] = {
            "observations": len(idx),
            "tokens_raw_p50": statistics.median(raw[i] for i in idx),
            "tokens_pruned_p50": statistics.median(pruned[i] for i in idx),
            "tokens_seen_p50": statistics.median(seen[i] for i in idx),
            "truncated_share": round(sum(rows[i]["truncated"] for i in idx) / len(idx), 3),
        }
    return out


def main(argv: list[str] | None = None) -> int:
    from evaluation.expert_table import expand_tasks, parse_seeds
    from models.lm.tokenizer import build_tokenizer, count_tokens

    ap = argparse.ArgumentParser(prog="python -m evaluation.bench.app_obs")
    ap.add_argument("--tasks", default="shop/*")
    ap.add_argument("--seeds", default="0:3")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    tasks = expand_tasks([t for t in a.tasks.split(",") if t])
    rows = asyncio.run(_collect(tasks, parse_seeds(a.seeds)))
    tok = build_tokenizer("bpe")
    s = summarize(rows, lambda texts: count_tokens(tok, texts))
    s.update(tasks=len(tasks), seeds=a.seeds)
    if not a.json:
        print(
            f"{s['observations']} observations: BPE tokens p50/p95 {s['tokens_raw_p50']:.0f}/"
            f"{s['tokens_raw_p95']:.0f} as the page is, {s['tokens_pruned_p50']:.0f}/"
            f"{s['tokens_pruned_p95']:.0f} pruned, {s['tokens_seen_p50']:.0f}/"
            f"{s['tokens_seen_p95']:.0f} pruned and truncated; truncated {s['truncated_share']:.1%}"
        )
    print(json.dumps(s))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
