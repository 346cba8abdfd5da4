"""The tokenizer corpus, collected in the live browser (``dynaweb tokenizer corpus``).

``collect_corpus(cfg, out)`` runs ``collectors.collector.run_collector`` on its own task server
(no broker): the scripted experts on every task that has one (8 episodes each, seeds 0-7) and
the random policy on every task (6 episodes each, at most 8 steps), as ``dynaweb experiment
world-model`` collects.  One transition per line (episode, step, task, source, obs, action,
next_obs, reward, done), episodes in collection order, gzipped.  ``models.tokenizer_train``
reads it back (``read_corpus``) and trains the BPE tokenizer on it.

``ListSink`` is the publisher double both collections use: it keeps the transitions a
collector sends, in memory, instead of publishing them; ``collect_to_list`` runs one collector
into it (the tokenizer corpus, the world-model study's collection, the imagination study's task
selection).
"""

from __future__ import annotations

import asyncio
import dataclasses
import gzip
import json
import time
from pathlib import Path
from typing import Any

from core.config import Config
from streams.records import Transition

_OBS_KEYS = ("instruction", "url", "tree", "focused", "last_action_error", "next_id")


class ListSink:
    """A publisher that keeps the transitions (no broker)."""

    def __init__(self) -> None:
        self.transitions: list = []

    def send(self, topic: str, rec: Any, key: str | None = None) -> None:
        if isinstance(rec, Transition):
            self.transitions.append(rec)

    def flush(self, *a: Any) -> None:
        pass


async def collect_to_list(
    cfg: Config,
    agent_factory: Any,
    base_url: str,
    collector_id: str,
    seed_offset: int,
    run_length: int,
) -> tuple[list, Any]:
    """One collector run on ``cfg.collector`` until ``collector.max_episodes``, without a broker:
    the transitions it sent, in the order sent, and its ``CollectorStats``."""
    from collectors.collector import run_collector
    from streams.topics import Topics

    sink = ListSink()
    stats = await run_collector(
        cfg,
        sink,
        Topics(cfg.run_id),
        agent_factory,
        asyncio.Event(),
        base_url=base_url,
        collector_id=collector_id,
        seed_offset=seed_offset,
        run_length=run_length,
    )
    return sink.transitions, stats


def _row(t: Any) -> dict:
    return {
        "episode_id": t.episode_id,
        "step": t.step,
        "task": t.task,
        "source": t.source,
        "obs": {k: t.obs.get(k) for k in _OBS_KEYS},
        "action": t.action,
        "next_obs": {k: t.next_obs.get(k) for k in _OBS_KEYS},
        "reward": t.reward,
        "done": t.done,
    }


def collect_corpus(
    cfg: Config,
    out: Path,
    expert_per_task: int = 8,
    random_per_task: int = 6,
    max_steps: int = 8,
    contexts: int = 2,
    log: Any = print,
) -> dict:
    """Expert episodes on every expert task and random-policy episodes on every task, written to
    ``out`` (gzipped JSONL, episodes in collection order); returns counts."""
    from collectors.agents import ExpertAgent, RandomAgent
    from collectors.tasks import list_tasks
    from collectors.taskserver import serve

    all_tasks = [t.name for t in list_tasks(suite="miniwob")]
    expert_tasks = [t for t in all_tasks if ExpertAgent().supports(t)]
    rows: list[dict] = []
    counts: dict = {}
    server, _, base = serve()

    async def one(policy: str, tasks: list[str], per_task: int, offset: int) -> None:
        # run_length 1: every context walks through the task list, context i starting at task i
        n = per_task * len(tasks)
        cc = dataclasses.replace(
            cfg,
            collector=dataclasses.replace(
                cfg.collector,
                tasks=tasks,
                contexts=contexts,
                max_steps=max_steps,
                seed_start=0,
                max_episodes=n,
            ),
        )
        agent = (lambda: ExpertAgent()) if policy == "expert" else (lambda: RandomAgent(seed=1))
        t0 = time.time()
        sent, st = await collect_to_list(
            cc, agent, base, f"tokenizer-corpus-{policy}", offset, run_length=1
        )
        first: dict[str, float] = {}
        for t in sent:
            first[t.episode_id] = min(first.get(t.episode_id, t.created_at), t.created_at)
        ts = sorted(sent, key=lambda t: (first[t.episode_id], t.episode_id, t.step))
        rows.extend(_row(t) for t in ts)
        counts[policy] = {
            "tasks": len(tasks),
            "episodes": st.episodes,
            "transitions": len(ts),
            "seconds": round(time.time() - t0, 1),
        }
        log(f"{policy}: {counts[policy]}")

    try:
        asyncio.run(one("expert", expert_tasks, expert_per_task, 0))
        asyncio.run(one("random", all_tasks, random_per_task, 500_000))
    finally:
        server.shutdown()
        server.server_close()
    out.parent.mkdir(parents=True, exist_ok=True)
    data = "".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in rows).encode()
    out.write_bytes(gzip.compress(data, compresslevel=9, mtime=0))
    counts["transitions"] = len(rows)
    counts["bytes_gz"] = out.stat().st_size
    return counts
