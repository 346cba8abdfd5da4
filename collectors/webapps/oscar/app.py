"""``ShopApp``: the django-oscar shop as a ``WebApp`` (where it runs, its data, its control API).

Where the shop runs, first match: a server this process started; ``DYNAWEB_SHOP_URL`` with
``DYNAWEB_SHOP_HOME`` (its state folder, for the control token); the shop ``dynaweb infra up``
started (``<home>/apps/shop/server.json``, ``home`` = ``DYNAWEB_HOME`` or ``./.dynaweb``);
else this process starts one there on a free port (stopped when the process exits).
"""

from __future__ import annotations

import atexit
import json
import os
import threading
from pathlib import Path
from typing import Any

from collectors.webapps.app import AppUnavailable
from collectors.webapps.oscar.server import ShopServer


def shop_home(home: str | os.PathLike | None = None) -> Path:
    root = Path(home or os.environ.get("DYNAWEB_HOME") or ".dynaweb")
    return root / "apps" / "shop"


class ShopApp:
    name = "shop"

    def __init__(self, home: str | os.PathLike | None = None, seed: int = 0):
        self._home = Path(home) if home else None
        self.seed = seed
        self.server: ShopServer | None = None
        self._url: str | None = None
        self._data: dict[str, dict] = {}
        self._lock = threading.Lock()

    @property
    def home(self) -> Path:
        if self.server is not None:
            return self.server.home
        env_home = os.environ.get("DYNAWEB_SHOP_HOME")
        if os.environ.get("DYNAWEB_SHOP_URL") and env_home:
            return Path(env_home)
        return self._home or shop_home()

    def use(self, server: ShopServer) -> ShopApp:
        """Use (and revive) this running server."""
        self.server, self._url = server, server.url
        return self

    def url(self) -> str:
        with self._lock:
            if self._url is None:
                self._url = self._locate()
            return self._url

    def _locate(self) -> str:
        from core.net import free_ports, http_status

        if os.environ.get("DYNAWEB_SHOP_URL"):
            return os.environ["DYNAWEB_SHOP_URL"].rstrip("/")
        home = self._home or shop_home()
        info = home / "server.json"
        if info.exists():
            url = json.loads(info.read_text())["url"]
            if http_status(url + "/answer/", timeout=3) == 200:
                return url
        (port,) = free_ports(1)
        self.server = ShopServer(home, port, seed=self.seed).start()
        atexit.register(self.server.stop)
        return self.server.url

    def revive(self) -> bool:
        """Restart the shop if the process this app started died."""
        with self._lock:
            return self.server.ensure() if self.server is not None else False

    def token(self) -> str:
        return (self.home / "control_token").read_text().strip()

    async def control(self, request: Any, action: str, body: dict | None = None) -> dict:
        url = f"{self.url()}/__dw/{action}"
        headers = {"X-DW-Token": self.token()}
        try:
            if body is None:
                r = await request.get(url, headers=headers, timeout=15_000)
            else:
                headers["Content-Type"] = "application/json"
                r = await request.post(url, headers=headers, data=json.dumps(body), timeout=15_000)
        except Exception as e:  # noqa: BLE001 - connection refused, reset, time-out
            raise AppUnavailable(f"{action}: {str(e).splitlines()[0][:160]}") from e
        if r.status != 200:
            raise AppUnavailable(f"{action}: HTTP {r.status} {(await r.text())[:160]}")
        return await r.json()

    async def data(self, request: Any) -> dict:
        url = self.url()
        if url not in self._data:
            cat = await self.control(request, "catalogue", {})
            from collectors.webapps.oscar.data import catalogue

            made = catalogue(self.seed)
            cat["customers"], cat["words"] = made["customers"], made["words"]
            cat["nonempty_categories"] = [c for c in cat["categories"] if c["count"]]
            self._data[url] = cat
        return self._data[url]
