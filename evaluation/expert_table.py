"""The expert success table: every scripted expert on real pages, one row per task.

``expert_table(tasks, seeds)`` runs each task's expert (``collectors.experts``) on every seed in
a live browser (``collectors.env.WebEnv``, ``contexts`` pages at once, an in-process task server
unless ``base_url`` is given) and returns one row per task: episodes, successes, success rate,
mean steps, the first failed seeds and why they failed.  The CLI is

    dynaweb experts [--tasks click-button,enter-text] [--seeds 0:100] [--contexts 4]
                    [--episodes FILE] [--json]

(``--tasks`` defaults to every expert, registered or not: ``collectors.experts.ALL_EXPERTS``);
the measured rates are what ``collectors.experts.VERIFIED`` records.  With ``--episodes FILE``
each finished episode is appended to FILE as one JSON line, and the episodes FILE already holds
(same task and seed) are not run again but counted: a long run that was stopped resumes where it
was, and the table covers every episode in FILE that ``--tasks`` x ``--seeds`` names.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time

from collectors.experts import ALL_EXPERTS, WAIT, Expert
from core.config import Config


async def run_episode(env, expert: Expert, task: str, seed: int) -> dict:
    obs, info = await env.reset(task, seed)
    history: list = []
    reward, steps, term, trunc = 0.0, 0, False, False
    info = {}
    while True:
        a = expert.act(obs, history)
        if a == WAIT:
            await asyncio.sleep(getattr(expert, "wait_s", 0.1))
        nobs, reward, term, trunc, info = await env.step(a)
        history.append((obs, a))
        obs = nobs
        steps += 1
        if term or trunc:
            break
    return {
        "task": task,
        "seed": seed,
        "reward": reward,
        "steps": steps,
        "terminated": term,
        "truncated": trunc,
        "reason": info.get("reason"),
        "timeout": info.get("timeout", False),
        "crashed": info.get("crashed", False),
    }


async def expert_table_async(
    tasks: list[str],
    seeds: list[int],
    contexts: int = 2,
    base_url: str | None = None,
    experts: dict | None = None,
    max_steps: int = 30,
    time_limit_ms: int = 60_000,
    episodes_path: str | None = None,
) -> list[dict]:
    """Run the expert of each task on every seed; one result row per task.  ``episodes_path``:
    a JSON-lines file of finished episodes, read first (those are not run again) and appended to."""
    from collectors.browser import Browser
    from collectors.env import WebEnv
    from collectors.tasks import app_expert

    experts = experts or ALL_EXPERTS
    server = None
    if base_url is None:
        from collectors.taskserver import serve

        server, _, base_url = serve()
    results: dict[str, list] = {t: [] for t in tasks}
    done = read_episodes(episodes_path, results, seeds) if episodes_path else set()
    # seed by seed over the tasks: a run stopped early has covered every task alike
    jobs = [(t, s) for s in seeds for t in tasks if (t, s) not in done]
    log = open(episodes_path, "a", encoding="utf-8") if episodes_path else None  # noqa: SIM115
    try:
        async with Browser(allowed_origins=[base_url]) as browser:
            queue: asyncio.Queue = asyncio.Queue()
            for j in jobs:
                queue.put_nowait(j)

            async def worker() -> None:
                env = WebEnv(browser, base_url, max_steps=max_steps, time_limit_ms=time_limit_ms)
                await env.open()
                try:
                    while True:
                        try:
                            t, s = queue.get_nowait()
                        except asyncio.QueueEmpty:
                            return
                        ex = experts.get(t) or app_expert(t)
                        if ex is None:
                            results[t].append(
                                {
                                    "task": t,
                                    "seed": s,
                                    "reward": 0.0,
                                    "steps": 0,
                                    "error": "no expert",
                                }
                            )
                            continue
                        try:
                            r = await run_episode(env, ex, t, s)
                        except Exception as e:  # noqa: BLE001 - a row, not a crash
                            r = {
                                "task": t,
                                "seed": s,
                                "reward": 0.0,
                                "steps": 0,
                                "error": str(e)[:200],
                            }
                            await env.restart()
                        results[t].append(r)
                        if log is not None:
                            log.write(json.dumps(r) + "\n")
                            log.flush()
                finally:
                    await env.close()

            await asyncio.gather(*(worker() for _ in range(max(1, contexts))))
    finally:
        if log is not None:
            log.close()
        if server is not None:
            server.shutdown()
            server.server_close()
    rows = []
    for t in tasks:
        rs = sorted(results[t], key=lambda r: r["seed"])
        n = len(rs)
        ok = sum(1 for r in rs if r["reward"] > 0)
        rows.append(
            {
                "task": t,
                "episodes": n,
                "successes": ok,
                "success_rate": ok / n if n else 0.0,
                "mean_steps": sum(r["steps"] for r in rs) / n if n else 0.0,
                "failed_seeds": [r["seed"] for r in rs if r["reward"] <= 0][:20],
                "reasons": sorted(
                    {
                        str(
                            r.get("reason")
                            or r.get("error")
                            or ("timeout" if r.get("timeout") else "max_steps")
                        )
                        for r in rs
                        if r["reward"] <= 0
                    }
                )[:5],
            }
        )
    return rows


def read_episodes(path: str, results: dict[str, list], seeds: list[int]) -> set[tuple[str, int]]:
    """Episodes of ``path`` (JSON lines, missing file = none) into ``results`` (only the tasks it
    has keys for and ``seeds``; the last line of a (task, seed) wins); the pairs read."""
    want = set(seeds)
    seen: dict[tuple[str, int], dict] = {}
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                try:
                    r = json.loads(line)
                except json.JSONDecodeError:  # a line cut by a stop mid-write
                    continue
                if r.get("task") in results and r.get("seed") in want:
                    seen[(r["task"], int(r["seed"]))] = r
    except FileNotFoundError:
        return set()
    for (t, _), r in seen.items():
        results[t].append(r)
    return set(seen)


def expert_table(
    tasks: list[str], seeds: list[int] | range, contexts: int = 2, base_url: str | None = None, **kw
) -> list[dict]:
    """Synchronous wrapper (the CLI subcommand calls this)."""
    return asyncio.run(expert_table_async(list(tasks), list(seeds), contexts, base_url, **kw))


def format_table(rows: list[dict]) -> str:
    w = max([len(r["task"]) for r in rows] + [4])
    out = [f"{'task':<{w}}  {'episodes':>8}  {'success':>7}  {'rate':>6}  {'steps':>5}"]
    for r in rows:
        out.append(
            f"{r['task']:<{w}}  {r['episodes']:>8}  {r['successes']:>7}  {r['success_rate']:>6.1%}  {r['mean_steps']:>5.1f}"
        )
    return "\n".join(out)


def expand_tasks(names: list[str]) -> list[str]:
    """Task names (a bare name is MiniWoB's); ``suite/*`` is every task of that suite that has
    an expert."""
    from collectors.tasks import list_tasks

    out: list[str] = []
    for t in names:
        if t.endswith("/*"):
            out += [s.name for s in list_tasks(suite=t[:-2]) if s.has_expert]
        else:
            out.append(t if "/" in t else f"miniwob/{t}")
    return out


def parse_seeds(spec: str) -> list[int]:
    out: list[int] = []
    for part in spec.split(","):
        if ":" in part:
            a, b = part.split(":", 1)
            out += list(range(int(a), int(b)))
        elif part:
            out.append(int(part))
    return out


def main(args: argparse.Namespace, cfg: Config | None = None) -> int:
    """``dynaweb experts``: the table (or JSON rows with ``--json``) for ``--tasks`` x ``--seeds``."""
    tasks = (
        sorted(ALL_EXPERTS)
        if not args.tasks or args.tasks == "all"
        else expand_tasks([t for t in args.tasks.split(",") if t])
    )
    t0 = time.time()
    rows = expert_table(
        tasks,
        parse_seeds(args.seeds),
        contexts=args.contexts,
        base_url=getattr(args, "base_url", None),
        episodes_path=getattr(args, "episodes", None),
    )
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        print(format_table(rows))
        print(f"({time.time() - t0:.1f} s)", file=sys.stderr)
    return 0
