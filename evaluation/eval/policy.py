"""``dynaweb eval policy``: a policy checkpoint acting in the live browser.

``collectors.env.WebEnv`` on an in-process task server; no training, nothing
published: per task the success rate with a 95 % **Wilson score interval**, the
mean number of steps, and the model versions.  Evaluation seeds must lie outside
the training seeds ``[collector.seed_start, collector.seed_stop)``; overlapping
seeds are refused.  Greedy by default (``--no-greedy --temperature T`` samples).
With ``--dreams`` (default) and a dream topic in the run, it also prints the
*dreamed* success of the same policy version on the same tasks and, per policy
version, the share of dream groups with a nonzero advantage.

``--checkpoint`` is a version number, ``latest``, or a local HF directory
(``evaluation.eval.sources``).  It prints a table (nothing but the JSON with
``--json``) and one JSON object on the last line.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from collections import defaultdict
from typing import Any

from core.config import Config
from evaluation.eval.sources import load_checkpoint, read_topic, topic_exists


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95 % Wilson score interval of a binomial proportion (0, 1 for n = 0)."""
    if n <= 0:
        return 0.0, 1.0
    p = k / n
    den = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return max(0.0, centre - half), min(1.0, centre + half)


def parse_seed_range(spec: str) -> list[int]:
    if ":" not in spec:
        raise ValueError(f"--seeds expects A:B, got {spec!r}")
    a, b = (int(x) for x in spec.split(":", 1))
    if b <= a:
        raise ValueError(f"--seeds {spec}: empty range")
    return list(range(a, b))


def check_eval_seeds(seeds: list[int], cfg: Config) -> None:
    lo, hi = cfg.collector.seed_start, cfg.collector.seed_stop
    bad = [s for s in seeds if lo <= s < hi]
    if bad:
        raise ValueError(
            f"evaluation seeds {min(seeds)}:{max(seeds) + 1} overlap the training seeds [{lo}, {hi}) "
            f"(collector.seed_start/seed_stop; e.g. seed {bad[0]}); evaluate on seeds outside it, "
            f"e.g. --seeds {hi}:{hi + 20}"
        )


def run_live_policy(
    cfg: Config,
    runner: Any,
    tasks: list[str],
    seeds: list[int],
    greedy: bool = True,
    temperature: float = 1.0,
    contexts: int = 1,
    deadline_s: float | None = None,
) -> list[dict]:
    """One row per episode: task, seed, reward, success, steps (live browser, nothing published).

    ``deadline_s``: no episode starts later than this many seconds after Chromium is up; episodes
    still running 5 s after that are cut, and every episode not run is a row with ``error``
    ``"deadline"``."""
    import asyncio

    from collectors.browser import Browser
    from collectors.env import WebEnv
    from collectors.taskserver import serve

    server, _, base = serve()
    jobs = [(t, s) for t in tasks for s in seeds]
    rows: list[dict] = []
    started = [0.0]

    async def go() -> None:
        queue: asyncio.Queue = asyncio.Queue()
        for j in jobs:
            queue.put_nowait(j)
        async with Browser(allowed_origins=[base]) as browser:

            async def worker() -> None:
                env = WebEnv(browser, base, cfg.collector, app_tokenizer=cfg.model.tokenizer)
                await env.open()
                try:
                    while not queue.empty():
                        if deadline_s is not None and time.monotonic() - started[0] >= deadline_s:
                            return
                        task, seed = queue.get_nowait()
                        try:
                            obs, _ = await env.reset(task, seed)
                            hist: list[str] = []
                            reward, steps = 0.0, 0
                            while True:
                                a, _, _ = runner.act(
                                    [obs], [hist], temperature=temperature, greedy=greedy
                                )[0]
                                obs, reward, term, trunc, _info = await env.step(a)
                                hist.append(a.to_text())
                                steps += 1
                                if term or trunc:
                                    break
                            rows.append(
                                {
                                    "task": task,
                                    "seed": seed,
                                    "reward": float(reward),
                                    "success": reward > 0,
                                    "steps": steps,
                                    "timeout": bool(_info.get("timeout")),
                                }
                            )
                        except Exception as e:  # noqa: BLE001 - a failed episode is a row, not a crash
                            rows.append(
                                {
                                    "task": task,
                                    "seed": seed,
                                    "reward": 0.0,
                                    "success": False,
                                    "steps": 0,
                                    "error": str(e)[:200],
                                }
                            )
                            await env.restart()
                finally:
                    await env.close()

            started[0] = time.monotonic()
            work = asyncio.gather(*(worker() for _ in range(max(1, contexts))))
            try:
                await asyncio.wait_for(work, None if deadline_s is None else deadline_s + 5.0)
            except TimeoutError:  # an episode ran past the deadline: it and the rest are not scored
                pass

    try:
        asyncio.run(go())
    finally:
        server.shutdown()
        server.server_close()
    done = {(r["task"], r["seed"]) for r in rows}
    rows += [
        {"task": t, "seed": s, "reward": 0.0, "success": False, "steps": 0, "error": "deadline"}
        for t, s in jobs
        if (t, s) not in done
    ]
    return rows


def dream_summary(transitions: list) -> dict:
    """Per policy version: dreamed success per task and the nonzero-advantage share of its groups."""
    eps: dict[str, list] = defaultdict(list)
    for t in transitions:
        if t.source == "dream":
            eps[t.episode_id].append(t)
    by_v: dict[int, dict] = {}
    for steps in eps.values():
        steps.sort(key=lambda t: t.step)
        last = steps[-1]
        v = by_v.setdefault(
            int(last.policy_version),
            {"tasks": defaultdict(lambda: [0, 0]), "groups": defaultdict(set)},
        )
        ok = float(last.reward) > 0
        v["tasks"][last.task][0] += int(ok)
        v["tasks"][last.task][1] += 1
        if last.group_id:
            v["groups"][last.group_id].add(round(float(last.reward), 6))
    out = {}
    for ver, d in sorted(by_v.items()):
        groups = d["groups"]
        out[ver] = {
            "rollouts": sum(n for _, n in d["tasks"].values()),
            "success_rate": sum(k for k, _ in d["tasks"].values())
            / max(1, sum(n for _, n in d["tasks"].values())),
            "nonzero_advantage_share": (sum(len(r) > 1 for r in groups.values()) / len(groups))
            if groups
            else None,
            "tasks": {
                t: {"successes": k, "rollouts": n, "success_rate": k / n}
                for t, (k, n) in sorted(d["tasks"].items())
            },
        }
    return out


def eval_policy(
    cfg: Config,
    checkpoint: str | None,
    tasks: list[str],
    seeds: list[int],
    greedy: bool = True,
    temperature: float = 1.0,
    contexts: int = 1,
    dreams: bool = True,
    timeout: float = 60.0,
    lookahead: int = 0,
    lookahead_depth: int = 1,
    world_model: str | None = None,
) -> dict:
    """Per task and overall: live success with its Wilson interval (module doc).  ``lookahead``
    K > 0: the same episodes (tasks x seeds) are run a second time with look-ahead acting
    (``models.dream.lookahead``: the policy's K best actions simulated ``lookahead_depth`` steps in
    the world model ``world_model``, default the policy's own version), and ``out["lookahead"]``
    holds its success, the paired difference against greedy per episode with its 95 % interval,
    and its cost."""
    from models.policy.runner import PolicyRunner

    check_eval_seeds(seeds, cfg)
    from collectors.tasks import get_task

    for t in tasks:
        get_task(t)  # unknown task -> a clear error before loading anything
    ck = load_checkpoint(cfg, "policy", checkpoint)
    try:
        mcfg = dataclasses.replace(
            cfg.model, max_positions=int(ck.model.config.max_position_embeddings)
        )
        runner = PolicyRunner(ck.model, ck.tokenizer, mcfg, policy_version=ck.version or 0, seed=0)
        t0 = time.time()
        eps = run_live_policy(cfg, runner, tasks, seeds, greedy, temperature, contexts)
        secs = time.time() - t0
        ahead = (
            _lookahead(cfg, runner, ck.version, world_model, lookahead, lookahead_depth)
            if lookahead > 0
            else None
        )
        if ahead is not None:
            ahead_eps = run_live_policy(cfg, ahead[0], tasks, seeds, True, temperature, contexts)
            ahead[1].close()
    finally:
        ck.close()
    per_task = {}
    for t in tasks:
        rs = [r for r in eps if r["task"] == t]
        k, n = sum(r["success"] for r in rs), len(rs)
        lo, hi = wilson(k, n)
        per_task[t] = {
            "episodes": n,
            "successes": k,
            "success_rate": k / max(1, n),
            "ci95_low": round(lo, 4),
            "ci95_high": round(hi, 4),
            "mean_steps": sum(r["steps"] for r in rs) / max(1, n),
            "errors": sum(1 for r in rs if "error" in r),
        }
    k = sum(r["success"] for r in eps)
    lo, hi = wilson(k, len(eps))
    out: dict = {
        "kind": "policy",
        "checkpoint": ck.version,
        "checkpoint_source": ck.source,
        "policy_version": ck.version,
        "greedy": greedy,
        "temperature": temperature,
        "seeds": f"{min(seeds)}:{max(seeds) + 1}",
        "training_seeds": f"{cfg.collector.seed_start}:{cfg.collector.seed_stop}",
        "interval": "wilson95",
        "episodes": len(eps),
        "success_rate": k / max(1, len(eps)),
        "ci95_low": round(lo, 4),
        "ci95_high": round(hi, 4),
        "seconds": round(secs, 2),
        "tasks": per_task,
        "dreams": None,
        "timeouts": sum(1 for r in eps if r.get("timeout")),
    }
    if dreams and ck.version is not None:
        out["dreams"] = _dreams_for(cfg, ck.version, tasks, timeout)
    out["lookahead"] = None
    if ahead is not None:
        out["lookahead"] = {
            "k": lookahead,
            "depth": lookahead_depth,
            "world_model": ahead[1].source,
            "world_model_version": ahead[1].version,
            **paired_difference(eps, ahead_eps),
            **ahead[0].stats.summary(),
        }
    return out


def _lookahead(
    cfg: Config, runner: Any, version: int | None, spec: str | None, k: int, depth: int
) -> tuple[Any, Any]:
    """(a look-ahead runner over ``runner`` and the world model ``spec``, default the policy's
    own version, or LATEST for a policy from a directory; the loaded world model to close)."""
    from models.dream.lookahead import LookaheadRunner
    from models.world_model.runner import WorldModelRunner

    wm = load_checkpoint(
        cfg, "world_model", spec or (str(version) if version is not None else None)
    )
    wr = WorldModelRunner(wm.model, wm.tokenizer, cfg.dream, max_positions=cfg.model.max_positions)
    return LookaheadRunner(runner, wr, k=k, depth=depth), wm


def paired_difference(greedy: list[dict], ahead: list[dict]) -> dict:
    """Look-ahead's success against greedy's on the same episodes (task, seed): the mean of the
    per-episode differences (in points) with a normal 95 % interval, and both success rates."""
    base = {(r["task"], r["seed"]): float(r["success"]) for r in greedy}
    d = [
        float(r["success"]) - base[(r["task"], r["seed"])]
        for r in ahead
        if (r["task"], r["seed"]) in base
    ]
    n = len(d)
    m = sum(d) / n if n else 0.0
    sd = math.sqrt(sum((x - m) ** 2 for x in d) / (n - 1)) if n > 1 else 0.0
    h = 1.96 * sd / math.sqrt(n) if n > 1 else None
    return {
        "episodes": n,
        "success_rate": sum(float(r["success"]) for r in ahead) / max(1, len(ahead)),
        "greedy_success_rate": sum(base.values()) / max(1, len(base)),
        "minus_greedy_points": round(100 * m, 2),
        "ci95_points": None if h is None else [round(100 * (m - h), 2), round(100 * (m + h), 2)],
    }


def _dreams_for(cfg: Config, version: int, tasks: list[str], timeout: float) -> dict:
    from streams.topics import Topics

    topic = Topics(cfg.run_id, cfg.kafka.partitions).dream
    try:
        if not topic_exists(cfg, topic):
            return {"available": False, "reason": f"no topic {topic}"}
        summary = dream_summary(read_topic(cfg, topic, timeout))
    except Exception as e:  # noqa: BLE001 - optional figures; the live ones stand alone
        return {"available": False, "reason": str(e)[:200]}
    mine = summary.get(version, {})
    return {
        "available": True,
        "topic": topic,
        "policy_version": version,
        "tasks": {t: mine.get("tasks", {}).get(t) for t in tasks},
        "by_version": {
            v: {k: s[k] for k in ("rollouts", "success_rate", "nonzero_advantage_share")}
            for v, s in summary.items()
        },
    }


def format_policy(res: dict) -> str:
    w = max([len(t) for t in res["tasks"]] + [4])
    dreams = (res.get("dreams") or {}).get("tasks") or {}
    mode = "greedy" if res["greedy"] else f"T={res['temperature']:g}"
    lines = [
        f"policy v{res['policy_version']} ({res['checkpoint_source']}), seeds {res['seeds']} "
        f"(training seeds {res['training_seeds']}), {mode}",
        f"{'task':<{w}}  {'eps':>4}  {'succ':>4}  {'rate':>6}  {'95% Wilson':>15}  {'steps':>5}  {'dreamed':>14}",
    ]
    for t, r in res["tasks"].items():
        d = dreams.get(t)
        ds = f"{d['success_rate']:6.1%} (n={d['rollouts']})" if d else "-"
        lines.append(
            f"{t:<{w}}  {r['episodes']:>4}  {r['successes']:>4}  {r['success_rate']:>6.1%}  "
            f"[{r['ci95_low']:5.1%}, {r['ci95_high']:5.1%}]  {r['mean_steps']:>5.1f}  {ds:>14}"
        )
    lines.append(
        f"{'all':<{w}}  {res['episodes']:>4}  {'':>4}  {res['success_rate']:>6.1%}  "
        f"[{res['ci95_low']:5.1%}, {res['ci95_high']:5.1%}]"
    )
    d = res.get("dreams") or {}
    if d.get("available"):
        for v, s in d["by_version"].items():
            nz = s["nonzero_advantage_share"]
            lines.append(
                f"dreams of policy v{v}: {s['rollouts']} rollouts, success {s['success_rate']:.1%}, "
                f"groups with nonzero advantage {'-' if nz is None else f'{nz:.1%}'}"
            )
    elif d:
        lines.append(f"dreams: not available ({d.get('reason')})")
    la = res.get("lookahead")
    if la:
        ci = la["ci95_points"]
        lines.append(
            f"look-ahead (k={la['k']}, depth {la['depth']}, world model {la['world_model']}): "
            f"success {la['success_rate']:.1%} against greedy {la['greedy_success_rate']:.1%}, "
            f"paired {la['minus_greedy_points']:+.1f} points"
            + ("" if ci is None else f" [{ci[0]:+.1f}, {ci[1]:+.1f}]")
            + f" over {la['episodes']} episodes; {la['wm_rows_per_decision']} world-model "
            f"predictions and {la['seconds_per_decision']} s per decision, greedy changed in "
            f"{la['changed_share']:.1%}"
        )
    lines.append("intervals: 95% Wilson score intervals")
    return "\n".join(lines)


def main(args: Any, cfg: Config) -> int:
    timeout = float(getattr(args, "timeout", 60.0) or 60.0)
    tasks = [
        t.strip() for t in (args.tasks or ",".join(cfg.collector.tasks)).split(",") if t.strip()
    ]
    tasks = [t if "/" in t else f"miniwob/{t}" for t in tasks]
    hi = cfg.collector.seed_stop
    seeds = parse_seed_range(args.seeds or f"{hi}:{hi + 20}")
    res = eval_policy(
        cfg,
        args.checkpoint,
        tasks,
        seeds,
        args.greedy,
        args.temperature,
        args.contexts,
        args.dreams,
        timeout,
        int(getattr(args, "lookahead", 0) or 0),
        int(getattr(args, "lookahead_depth", 1) or 1),
        getattr(args, "world_model", None),
    )
    if not args.json:
        print(format_policy(res))
    print(json.dumps(res, default=str))
    return 0
