"""Parity with the Farama MiniWoB++ Gymnasium environment (PyPI ``miniwob``, Selenium +
ChromeDriver) for the pointer actions (drag, select_text, click_at).

For each (task, seed), the scripted expert plays the episode in our environment; each action is
recorded as the pointer events it performed, at the viewport coordinates it used (a drag: press
on the element's grab point, moves, release on the drop point; a click_at or click: a click at
that point).  The same events are then replayed in the Farama environment on the same task and
seed (``MOUSEDOWN_COORDS`` / ``MOVE_COORDS`` / ``MOUSEUP_COORDS`` / ``CLICK_COORDS``), and the
two raw rewards must agree.  ``select_text`` has no Farama counterpart (a text selection there
is a mouse drag over the glyphs), so it is not part of this check.

Needs ChromeDriver: Debian ``apt-get install chromium-driver`` (the same Chromium build).  With
``CI=true`` a missing driver fails the test; elsewhere it skips.  Run it with

    CI=true .venv/bin/python -m pytest -q tests/integration/test_farama_parity.py

``MINIWOB_CHROME_BINARY`` / ``MINIWOB_CHROMEDRIVER`` (Farama's variables) default to
``/usr/bin/chromium`` and ``/usr/bin/chromedriver``.
"""

from __future__ import annotations

import os
import shutil

import pytest

from collectors.env import WebEnv
from collectors.experts import EXPERTS, WAIT
from collectors.page_actions import CLICK_BY_ID_JS
from collectors.pointer_actions import DRAG_START_PX, DRAG_STEPS, _box, _grab_point
from core.spaces import Action

pytestmark = pytest.mark.integration

CASES = [
    ("drag-box", 1),
    ("drag-box", 2),
    ("drag-items", 1),
    ("drag-items", 3),
    ("drag-circle", 2),
    ("circle-center", 1),
    ("find-midpoint", 2),
]


def _driver() -> tuple[str, str]:
    chrome = os.environ.get("MINIWOB_CHROME_BINARY") or shutil.which("chromium") or ""
    driver = os.environ.get("MINIWOB_CHROMEDRIVER") or shutil.which("chromedriver") or ""
    if not (chrome and driver):
        msg = "ChromeDriver not found: apt-get install chromium-driver"
        if os.environ.get("CI") == "true":
            pytest.fail(msg)
        pytest.skip(msg)
    return chrome, driver


async def _events(env: WebEnv, a: Action) -> list[tuple]:
    """The pointer events ``a`` performs, at the viewport coordinates our environment uses."""
    page = env.page
    if a.kind == "click":
        p = await page.evaluate(CLICK_BY_ID_JS, a.element)
        return [("CLICK_COORDS", p["x"], p["y"])] if p else []
    if a.kind == "click_at":
        box = await _box(page, a.element)
        return [("CLICK_COORDS", box["x"] + a.x, box["y"] + a.y)]
    if a.kind == "drag":
        sx, sy = await _grab_point(page, a.element)
        box = await _box(page, a.target)
        tx = box["x"] + (a.x if a.x is not None else box["w"] / 2)
        ty = box["y"] + (a.y if a.y is not None else box["h"] / 2)
        ox, oy = sx + DRAG_START_PX, sy + DRAG_START_PX
        moves = [
            (ox + (tx - ox) * k / DRAG_STEPS, oy + (ty - oy) * k / DRAG_STEPS)
            for k in range(1, DRAG_STEPS + 1)
        ]
        return (
            [("MOUSEDOWN_COORDS", sx, sy), ("MOVE_COORDS", ox, oy)]
            + [("MOVE_COORDS", x, y) for x, y in moves]
            + [("MOUSEUP_COORDS", tx, ty)]
        )
    raise AssertionError(f"no Farama counterpart for {a.to_text()}")


def _ours(bl, task: str, seed: int) -> tuple[float, list[tuple]]:
    async def go():
        ex = EXPERTS[f"miniwob/{task}"]
        async with WebEnv(bl.browser, bl.base_url) as env:
            obs, _ = await env.reset(f"miniwob/{task}", seed)
            events: list[tuple] = []
            history: list = []
            for _ in range(20):
                a = ex.act(obs, history)
                assert a != WAIT, f"{task}/{seed}: the expert waited"
                events += await _events(env, a)
                nobs, _, term, trunc, info = await env.step(a)
                history.append((obs, a))
                obs = nobs
                if term or trunc:
                    return info["raw_reward"], events
        raise AssertionError(f"{task}/{seed}: no end")

    return bl.run(go())


def _farama(task: str, seed: int, events: list[tuple]) -> float:
    chrome, driver = _driver()
    os.environ.setdefault("MINIWOB_CHROME_BINARY", chrome)
    os.environ.setdefault("MINIWOB_CHROMEDRIVER", driver)
    import gymnasium
    import miniwob
    import numpy as np

    gymnasium.register_envs(miniwob)
    env = gymnasium.make(f"miniwob/{task}-v1")
    try:
        env.reset(seed=seed)
        raw = 0.0
        for kind, x, y in events:
            act = env.unwrapped.create_action(kind, coords=np.array([x, y], dtype=np.float32))
            _, _, terminated, _, info = env.step(act)
            if terminated:
                raw = float(info.get("raw_reward", 0.0))
                break
        return raw
    finally:
        env.close()


@pytest.mark.parametrize("task,seed", CASES)
def test_same_events_same_reward_in_farama_miniwob(bl, task: str, seed: int) -> None:
    _driver()
    ours, events = _ours(bl, task, seed)
    assert ours > 0, (task, seed, ours)
    theirs = _farama(task, seed, events)
    assert abs(theirs - ours) < 0.02, (task, seed, ours, theirs, events[:4])
