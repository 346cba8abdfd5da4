"""Chromium via Playwright (async API): one browser, one page per context.

Debian's ``chromium`` is used (``playwright install`` cannot download here).
Every context gets an origin allowlist: the task server's origin plus
``CollectorConfig.allowed_origins``.  Requests (and websockets) to any other
origin are aborted and counted; downloads are refused and popup pages closed.
"""

from __future__ import annotations

import asyncio
import logging
import re
import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

log = logging.getLogger(__name__)

CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
    "--disable-quic",
]

# URL schemes that never leave the page (not network requests)
_LOCAL_SCHEMES = ("data", "blob", "about", "javascript")


class ChromiumMissing(RuntimeError):
    pass


def chromium_path() -> str:
    """Path of the Chromium binary; a clear error when it is not installed."""
    for name in ("chromium", "chromium-browser"):
        p = shutil.which(name)
        if p:
            return p
    raise ChromiumMissing(
        "Chromium is not installed (no `chromium` on PATH). Install Debian's build with "
        "`apt-get install -y chromium` (`playwright install` cannot download browsers here)."
    )


def origin_of(url: str) -> str:
    """``scheme://host[:port]`` with default ports made explicit; '' for local schemes."""
    s = urlsplit(url)
    scheme = (s.scheme or "").lower()
    if scheme in _LOCAL_SCHEMES or not scheme:
        return ""
    host = (s.hostname or "").lower()
    port = s.port or {"http": 80, "https": 443, "ws": 80, "wss": 443}.get(scheme, 0)
    return f"{scheme}://{host}:{port}"


def normalise_origins(origins: Iterable[str]) -> set[str]:
    out = set()
    for o in origins:
        o = o.strip()
        if not o:
            continue
        if "://" not in o:
            o = "http://" + o
        out.add(origin_of(o))
    return out


@dataclass
class Allowlist:
    """Origins a context may reach; everything else is blocked and counted."""

    origins: set[str]
    blocked: int = 0
    blocked_urls: list = field(default_factory=list)  # the last few, for debugging
    on_block: Callable[[str, str], None] | None = None  # (kind, url)

    def allows(self, url: str) -> bool:
        o = origin_of(url)
        if not o:
            return True
        if o in self.origins:
            return True
        # websockets to an allowed http(s) origin
        if o.startswith("ws"):
            return ("http" + o[2:]) in self.origins
        return False

    def block(self, kind: str, url: str) -> None:
        self.blocked += 1
        self.blocked_urls.append(url)
        del self.blocked_urls[:-20]
        log.debug("blocked %s to %s", kind, url)
        if self.on_block is not None:
            try:
                self.on_block(kind, url)
            except Exception:  # a metrics callback must not break browsing
                log.exception("on_block callback failed")


class Browser:
    """One Chromium process; ``new_page()`` makes a fresh context with one page."""

    def __init__(
        self,
        headless: bool = True,
        allowed_origins: Iterable[str] = (),
        on_block: Callable[[str, str], None] | None = None,
    ):
        self.headless = headless
        self.allowed = normalise_origins(allowed_origins)
        self.on_block = on_block
        self._pw = None
        self._browser = None
        self.launches = 0
        self._lock = asyncio.Lock()

    async def start(self) -> Browser:
        from playwright.async_api import async_playwright

        exe = chromium_path()
        if self._pw is None:
            self._pw = await async_playwright().start()
        self._browser = await self._pw.chromium.launch(
            executable_path=exe, headless=self.headless, args=CHROMIUM_ARGS
        )
        self.launches += 1
        return self

    @property
    def connected(self) -> bool:
        return self._browser is not None and self._browser.is_connected()

    async def restart(self) -> None:
        if self._browser is not None:
            await close_quietly(self._browser.close(), "browser")
        self._browser = None
        await self.start()

    async def ensure(self) -> None:
        """Relaunch Chromium if it died (several contexts may ask at once: one relaunch)."""
        if self.connected:
            return
        async with self._lock:
            if not self.connected:
                await self.restart()

    async def new_page(self, extra_origins: Iterable[str] = ()):
        """A new context with one page; returns ``(context, page, allowlist)``."""
        await self.ensure()
        allow = Allowlist(self.allowed | normalise_origins(extra_origins), on_block=self.on_block)
        ctx = await self._browser.new_context(
            accept_downloads=False,
            service_workers="block",
            viewport={"width": 500, "height": 400},
            java_script_enabled=True,
            bypass_csp=False,
        )
        ctx.set_default_timeout(5000)
        ctx.set_default_navigation_timeout(15000)
        await install_allowlist(ctx, allow)
        page = await ctx.new_page()
        main = page

        def on_page(p) -> None:  # popups / window.open: only one page per context
            if p is main:
                return
            allow.block("popup", p.url)
            asyncio.ensure_future(_close_quietly(p))

        ctx.on("page", on_page)
        page.on(
            "download",
            lambda d: (allow.block("download", d.url), asyncio.ensure_future(d.cancel())),
        )
        return ctx, page, allow

    async def close(self) -> None:
        if self._browser is not None:
            await close_quietly(self._browser.close(), "browser")
        self._browser = None
        if self._pw is not None:
            await close_quietly(self._pw.stop(), "playwright driver")
            self._pw = None

    async def __aenter__(self) -> Browser:
        return await self.start()

    async def __aexit__(self, *exc) -> None:
        await self.close()


async def close_quietly(closing: Any, what: str, timeout: float | None = None) -> None:
    """Await a close of something that may already be dead (a crashed page, context or
    browser): the failure is logged, never raised, since the caller is tearing it down."""
    try:
        await asyncio.wait_for(closing, timeout) if timeout else await closing
    except Exception as e:  # noqa: BLE001 - closing a dead target fails in many ways; all are moot
        log.debug("closing the %s failed (already gone?): %s", what, e)


async def _close_quietly(page) -> None:
    await close_quietly(page.close(), "page")


def _not_allowed_regex(origins: set[str]) -> re.Pattern:
    """Matches every URL that does not start with an allowed origin (or a local scheme).

    Routing only these keeps allowed requests off the Python round trip; the
    handler re-checks with ``Allowlist.allows`` so the regex is only a filter.
    """
    alts = []
    for o in sorted(origins):
        scheme, rest = o.split("://", 1)
        host, port = rest.rsplit(":", 1)
        default = {"http": "80", "https": "443"}.get(scheme)
        port_re = f"(?::{port})" + ("?" if port == default else "")
        alts.append(f"{re.escape(scheme)}://{re.escape(host)}{port_re}(?:[/?#]|$)")
    local = "|".join(f"{s}:" for s in _LOCAL_SCHEMES)
    allowed = "|".join(alts + [local])
    return re.compile(f"^(?!(?:{allowed}))", re.I)


async def install_allowlist(ctx, allow: Allowlist) -> None:
    """Route requests and websockets of ``ctx`` through ``allow``."""

    async def on_route(route) -> None:
        url = route.request.url
        if allow.allows(url):
            await route.fallback()
        else:
            allow.block("request", url)
            await route.abort("blockedbyclient")

    pattern = _not_allowed_regex(allow.origins)
    await ctx.route(pattern, on_route)

    async def on_ws(ws) -> None:
        if allow.allows(ws.url):
            ws.connect_to_server()
        else:
            allow.block("websocket", ws.url)
            await ws.close(code=1008, reason="origin not allowed")

    try:
        await ctx.route_web_socket(re.compile(r"^wss?://"), on_ws)
    except AttributeError:  # older Playwright: no websocket routing
        log.warning("this Playwright cannot route websockets; they are not filtered")
