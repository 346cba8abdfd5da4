"""``dynaweb eval replay``: dreams checked against reality.

Takes up to ``--n`` dreamed rollouts of the run (the dream topic; complete rollouts that start
on a real task's first page: ``info.start_step`` 0) and replays each one's action sequence in the
live environment (``collectors.env.WebEnv``, real Chromium, an in-process task server) from the
same task and seed: reset, then the dreamed actions in order until the live episode ends or the
actions run out.  Reports:

- ``dream_reward_auroc``: the AUROC of the dreamed score of each rollout (the world model's
  p(success) at its last step, ``info.p_success``, else its dreamed reward) against the live
  outcome (reward > 0); None when every replay had the same outcome;
- dreamed and real success rates, their agreement, overall, per task and per policy version.

Nothing is published; the live episodes are evaluation, not training data.
"""

from __future__ import annotations

import json
import random
from collections import defaultdict
from typing import Any

from core.config import Config


def auroc(scores: list[float], labels: list[bool]) -> float | None:
    """P(score of a positive > score of a negative), ties counted half; None without both."""
    pos = [s for s, y in zip(scores, labels, strict=True) if y]
    neg = [s for s, y in zip(scores, labels, strict=True) if not y]
    if not pos or not neg:
        return None
    wins = sum((p > n) + 0.5 * (p == n) for p in pos for n in neg)
    return wins / (len(pos) * len(neg))


def dreamed_rollouts(transitions: list) -> list[dict]:
    """Complete dreamed rollouts from a task's first page: task, seed, actions, dreamed score."""
    eps: dict[str, list] = defaultdict(list)
    for t in transitions:
        if t.source == "dream":
            eps[t.episode_id].append(t)
    out = []
    for ep, steps in eps.items():
        steps.sort(key=lambda t: t.step)
        last = steps[-1]
        complete = [t.step for t in steps] == list(range(len(steps))) and (
            last.done or last.truncated
        )
        if not complete or int((steps[0].info or {}).get("start_step", 0)) != 0:
            continue
        p = (last.info or {}).get("p_success")
        out.append(
            {
                "episode_id": ep,
                "task": last.task,
                "seed": int(last.seed),
                "policy_version": int(last.policy_version),
                "actions": [t.action for t in steps],
                "dreamed_success": float(last.reward) > 0,
                "dreamed_score": float(p) if p is not None else float(last.reward),
            }
        )
    return out


def replay(cfg: Config, rollouts: list[dict]) -> list[dict]:
    """Each rollout's actions in the live environment; the rollout with ``real_success`` (and
    ``error`` when the live episode could not be run)."""
    import asyncio

    from collectors.browser import Browser
    from collectors.env import WebEnv
    from collectors.taskserver import serve
    from core.spaces import parse_action

    server, _, base = serve()
    rows: list[dict] = []

    async def go() -> None:
        async with Browser(allowed_origins=[base]) as browser:
            env = WebEnv(browser, base, cfg.collector, app_tokenizer=cfg.model.tokenizer)
            await env.open()
            try:
                for ro in rollouts:
                    row = {**ro, "real_success": False, "real_steps": 0}
                    try:
                        await env.reset(ro["task"], ro["seed"])
                        reward = 0.0
                        for text in ro["actions"]:
                            _obs, reward, term, trunc, _ = await env.step(parse_action(text))
                            row["real_steps"] += 1
                            if term or trunc:
                                break
                        row["real_success"] = reward > 0
                    except Exception as e:  # noqa: BLE001 - a replay that fails is a row, not a crash
                        row["error"] = str(e)[:200]
                        await env.restart()
                    rows.append(row)
            finally:
                await env.close()

    try:
        asyncio.run(go())
    finally:
        server.shutdown()
        server.server_close()
    return rows


def _rates(rows: list[dict]) -> dict:
    n = len(rows)
    return {
        "n": n,
        "dreamed_success": round(sum(r["dreamed_success"] for r in rows) / max(1, n), 4),
        "real_success": round(sum(r["real_success"] for r in rows) / max(1, n), 4),
        "agreement": round(
            sum(r["dreamed_success"] == r["real_success"] for r in rows) / max(1, n), 4
        ),
    }


def summarize(rows: list[dict]) -> dict:
    ok = [r for r in rows if "error" not in r]
    score = auroc([r["dreamed_score"] for r in ok], [r["real_success"] for r in ok])
    by_task: dict[str, list] = defaultdict(list)
    by_version: dict[int, list] = defaultdict(list)
    for r in ok:
        by_task[r["task"]].append(r)
        by_version[r["policy_version"]].append(r)
    return {
        "dream_reward_auroc": None if score is None else round(score, 4),
        **_rates(ok),
        "errors": len(rows) - len(ok),
        "by_task": {t: _rates(v) for t, v in sorted(by_task.items())},
        "by_policy_version": {str(v): _rates(rs) for v, rs in sorted(by_version.items())},
    }


def check_run(cfg: Config, n: int) -> dict:
    """Up to ``n`` of the run's complete dreamed rollouts from a first page (a fixed sample),
    replayed live and summarised; ValueError when the run has none."""
    from evaluation.eval.sources import read_topic
    from streams.topics import Topics

    topic = Topics(cfg.run_id, cfg.kafka.partitions).dream
    found = dreamed_rollouts(read_topic(cfg, topic, timeout=120.0))
    if not found:
        raise ValueError(f"no complete dreamed rollout from a first page on {topic}")
    picked = random.Random(0).sample(found, min(n, len(found)))
    return {"topic": topic, "rollouts_found": len(found), **summarize(replay(cfg, picked))}


def main(args: Any, cfg: Config) -> int:
    res = check_run(cfg, int(getattr(args, "n", None) or 50))
    if not args.json:
        print(
            f"{res['n']} dreamed rollouts replayed live: AUROC of the dreamed reward against real "
            f"success {res['dream_reward_auroc']}; dreamed {res['dreamed_success']:.0%}, real "
            f"{res['real_success']:.0%}, agreement {res['agreement']:.0%}"
        )
        for task, r in res["by_task"].items():
            print(
                f"  {task:40s} n {r['n']:3d} dreamed {r['dreamed_success']:.0%} real {r['real_success']:.0%}"
            )
    print(json.dumps(res))
    return 0
