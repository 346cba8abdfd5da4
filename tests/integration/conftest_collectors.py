"""Shared helpers for the collector integration tests (imported, not a conftest; the ``bl``
fixture is in tests/integration/conftest.py).

One task server and one Chromium per test session, driven from an asyncio
loop in a background thread; tests call ``bl.run(coro)``.  Without Chromium the
tests skip, except under ``CI=true`` where they fail.

``run_experts``: every registered expert on the same seeds once per session (the ``expert_runs``
fixture), read by the expert success test and the candidate coverage test.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import threading
from dataclasses import dataclass, field
from typing import Any

import pytest

from collectors.browser import Browser, ChromiumMissing, chromium_path


def require_chromium() -> str:
    try:
        return chromium_path()
    except ChromiumMissing as e:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(str(e), pytrace=False)
        pytest.skip(str(e))
    raise AssertionError("unreachable")


class BrowserLoop:
    """A task server + one Chromium, used from synchronous tests."""

    def __init__(self) -> None:
        from collectors.taskserver import serve

        self.server, _, self.base_url = serve()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(
            target=self.loop.run_forever, name="browser-loop", daemon=True
        )
        self.thread.start()
        self.blocked: list = []
        self.browser = Browser(
            allowed_origins=[self.base_url], on_block=lambda k, u: self.blocked.append((k, u))
        )
        self.run(self.browser.start())

    def run(self, coro: Any, timeout: float = 300.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        try:
            self.run(self.browser.close(), timeout=30)
        except Exception:
            pass
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.server.shutdown()
        self.server.server_close()


_SINGLETON: BrowserLoop | None = None


def browser_loop_instance() -> BrowserLoop:
    global _SINGLETON
    require_chromium()
    if _SINGLETON is None:
        _SINGLETON = BrowserLoop()
        atexit.register(_SINGLETON.close)
    return _SINGLETON


# seeds 1000.. per registered expert (not the seeds the success bar was measured on); the steps of
# the first CAND_SEEDS of them are kept for the candidate check
EXPERT_SEEDS = int(os.environ.get("DW_EXPERT_SEEDS", "10"))
CAND_SEEDS = int(os.environ.get("DW_CAND_SEEDS", "2"))


@dataclass
class ExpertRuns:
    """Every registered expert's episodes on ``seeds`` (``evaluation.expert_table.run_episode``)."""

    seeds: list[int]
    success: dict[str, list[bool]]  # task -> one entry per seed
    step_seeds: list[int]  # the seeds whose steps are kept
    # (task, seed, observation, the episode's earlier actions as text, the expert's action)
    steps: list[tuple] = field(default_factory=list)


class _Recording:
    """An expert that keeps what it saw and did (``steps``: None keeps nothing)."""

    def __init__(self, expert: Any, task: str, seed: int, steps: list | None):
        self._expert, self._task, self._seed, self._steps = expert, task, seed, steps

    def __getattr__(self, name: str) -> Any:  # wait_s and the like: the expert's own
        return getattr(self._expert, name)

    def act(self, obs: Any, history: list) -> Any:
        a = self._expert.act(obs, history)
        if self._steps is not None:
            self._steps.append((self._task, self._seed, obs, [h.to_text() for _, h in history], a))
        return a


def run_experts(bl: BrowserLoop, seeds: int = EXPERT_SEEDS, step_seeds: int = CAND_SEEDS):
    """Every registered expert on seeds 1000.. in the session's browser, three pages at once (one
    task per page for a while: page reuse, as the collector does)."""
    from collectors.env import WebEnv
    from collectors.experts import EXPERTS
    from evaluation.expert_table import run_episode

    tasks = sorted(EXPERTS)
    runs = ExpertRuns(
        [1000 + s for s in range(seeds)],
        {t: [] for t in tasks},
        [1000 + s for s in range(min(step_seeds, seeds))],
    )
    jobs = [(t, s) for t in tasks for s in runs.seeds]

    async def worker(chunk: list) -> None:
        env = WebEnv(bl.browser, bl.base_url, max_steps=30)
        await env.open()
        try:
            for t, s in chunk:
                keep = runs.steps if s in runs.step_seeds else None
                r = await run_episode(env, _Recording(EXPERTS[t], t, s, keep), t, s)
                runs.success[t].append(r["reward"] > 0)
        finally:
            await env.close()

    async def all_jobs() -> None:
        n = 3
        chunks = [[j for k, j in enumerate(jobs) if (k // seeds) % n == i] for i in range(n)]
        await asyncio.gather(*(worker(c) for c in chunks))

    bl.run(all_jobs(), timeout=1800)
    return runs
