"""Shared helpers for the collector integration tests (imported, not a conftest; the ``bl``
fixture is in tests/integration/conftest.py).

One task server and one Chromium per test session, driven from an asyncio
loop in a background thread; tests call ``bl.run(coro)``.  Without Chromium the
tests skip, except under ``CI=true`` where they fail.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import threading
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
