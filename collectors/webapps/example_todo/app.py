"""A small to-do list web app (standard library only) and its ``WebApp`` for the suite.

The site: ``/`` lists this browser's to-dos and has a form to add one.  The control API, for
the suite only (a secret token in a header): ``/__control/state`` (this browser's to-dos) and
``/__control/reset`` (empty them).  Each browser is told apart by a cookie, so two browser
contexts never share a list.
"""

from __future__ import annotations

import html
import json
import secrets
import threading
import uuid
from http.cookies import SimpleCookie
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs

from collectors.webapps.app import AppUnavailable

TOKEN = secrets.token_urlsafe(16)  # generated at start, never shown to the agent
LISTS: dict[str, list[str]] = {}


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass

    def _sid(self) -> tuple[str, bool]:
        c = SimpleCookie(self.headers.get("Cookie", ""))
        if "sid" in c:
            return c["sid"].value, False
        return uuid.uuid4().hex, True

    def _send(self, code: int, body: str, ctype: str, sid: str, new: bool, **hdr: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        if new:
            self.send_header("Set-Cookie", f"sid={sid}; Path=/")
        for k, v in hdr.items():
            self.send_header(k, v)
        data = body.encode()
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        sid, new = self._sid()
        if self.path.startswith("/__control/"):
            if self.headers.get("X-Token") != TOKEN:
                return self._send(403, "{}", "application/json", sid, False)
            if self.path == "/__control/reset":
                LISTS.pop(sid, None)
            state = {"todos": LISTS.get(sid, [])}
            return self._send(200, json.dumps(state), "application/json", sid, False)
        items = "".join(f"<li>{html.escape(t)}</li>" for t in LISTS.get(sid, []))
        page = (
            "<html><head><title>To-do</title></head><body><h1>My to-do list</h1>"
            f"<ul>{items}</ul><form method='post' action='/add'>"
            "<label for='item'>New item</label><input id='item' name='item'>"
            "<button type='submit'>Add</button></form></body></html>"
        )
        self._send(200, page, "text/html; charset=utf-8", sid, new)

    def do_POST(self) -> None:
        sid, new = self._sid()
        n = int(self.headers.get("Content-Length", 0))
        item = parse_qs(self.rfile.read(n).decode()).get("item", [""])[0].strip()
        if item:
            LISTS.setdefault(sid, []).append(item)
        self._send(303, "", "text/plain", sid, new, Location="/")


class TodoApp:
    """The to-do app as a ``collectors.webapps.app.WebApp``: started in this process on a free
    loopback port at first use."""

    name = "todo"

    def __init__(self) -> None:
        self.server: ThreadingHTTPServer | None = None

    def url(self) -> str:
        if self.server is None:
            self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
            threading.Thread(target=self.server.serve_forever, daemon=True).start()
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def revive(self) -> bool:
        return False  # a thread of this process: it dies only with the process

    async def data(self, request: Any) -> dict:
        return {"items": [{"text": t} for t in ("buy milk", "call Ada", "water the plants")]}

    async def control(self, request: Any, action: str, body: dict | None = None) -> dict:
        try:
            r = await request.get(f"{self.url()}/__control/{action}", headers={"X-Token": TOKEN})
        except Exception as e:  # noqa: BLE001 - the app did not answer
            raise AppUnavailable(str(e)) from e
        return await r.json()
