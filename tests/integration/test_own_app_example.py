"""docs/own-app.md's worked example: the page shows the example's files as they are, and the
example's task runs end to end on the real app (a loopback server) in real Chromium: the expert
succeeds, stopping at once fails, and two contexts keep separate lists."""

from __future__ import annotations

from pathlib import Path

from collectors.env import WebEnv
from collectors.tasks import get_task
from collectors.webapps.example_todo.app import TodoApp
from collectors.webapps.example_todo.checks import EXPERTS
from collectors.webapps.suites import register_app_suite
from core.spaces import Action
from evaluation.expert_table import run_episode
from tests.integration.conftest_collectors import BrowserLoop, browser_loop_instance

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "collectors" / "webapps" / "example_todo"


def test_the_page_shows_the_example_as_it_is() -> None:
    doc = (ROOT / "docs" / "own-app.md").read_text()
    for name in ("app.py", "tasks.yaml", "checks.py"):
        assert (EXAMPLE / name).read_text() in doc, f"docs/own-app.md does not show {name} as it is"


def test_the_example_task_runs_end_to_end() -> None:
    register_app_suite(TodoApp(), EXAMPLE / "tasks.yaml", EXPERTS)
    assert get_task("todo/add-item").has_expert
    bl: BrowserLoop = browser_loop_instance()

    async def run() -> tuple:
        a, b = WebEnv(bl.browser, bl.base_url), WebEnv(bl.browser, bl.base_url)
        await a.open()
        await b.open()
        try:
            rows = [
                await run_episode(a, EXPERTS["todo/add-item"], "todo/add-item", s) for s in range(3)
            ]
            await b.reset("todo/add-item", 0)
            other = await b.app_episode.control("state")  # b's list: nothing of a's
            _, neg, *_ = await b.step(Action.stop())
            return rows, other, neg
        finally:
            await a.close()
            await b.close()

    rows, other, neg = bl.run(run())
    assert [r["reward"] for r in rows] == [1.0, 1.0, 1.0], rows
    assert other == {"todos": []}
    assert neg == 0.0
