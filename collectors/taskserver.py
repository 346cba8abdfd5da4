"""Loopback HTTP server for the MiniWoB++ task pages.

Serves the ``html/`` folder that the ``miniwob`` PyPI package ships (the
task pages live under ``/miniwob/<task>.html``).  Binds 127.0.0.1 by default
and logs nothing per request.

    python -m collectors.taskserver --port 8765
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
import signal
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

log = logging.getLogger(__name__)


def miniwob_html_dir() -> Path:
    """The ``html`` folder of the installed ``miniwob`` package."""
    try:
        import miniwob
    except ImportError as e:  # pragma: no cover - dependency of the project
        raise RuntimeError(
            "the `miniwob` package is not installed: pip install miniwob==1.1.0"
        ) from e
    path = Path(os.path.dirname(miniwob.__file__)) / "html"
    if not (path / "miniwob").is_dir():
        raise RuntimeError(f"miniwob task pages not found under {path}")
    return path


class _QuietHandler(SimpleHTTPRequestHandler):
    # HTTP/1.1 keep-alive makes page loads cheaper (one connection for all assets)
    protocol_version = "HTTP/1.1"
    # the task pages are UTF-8 but do not say so (unicode-test would show mojibake)
    extensions_map = {
        **SimpleHTTPRequestHandler.extensions_map,
        ".html": "text/html; charset=utf-8",
        ".js": "text/javascript; charset=utf-8",
        ".css": "text/css; charset=utf-8",
        ".json": "application/json; charset=utf-8",
    }

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - stdlib signature
        pass

    def end_headers(self) -> None:
        # The pages are static; let the browser cache them (routing may disable it anyway).
        self.send_header("Cache-Control", "max-age=3600")
        super().end_headers()

    def handle(self) -> None:
        try:
            super().handle()
        except (ConnectionResetError, BrokenPipeError):
            pass


class TaskServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def handle_error(self, request, client_address) -> None:  # quiet on client disconnects
        log.debug("task server: error serving %s", client_address, exc_info=True)


def serve(host: str = "127.0.0.1", port: int = 0, directory: str | os.PathLike | None = None):
    """Start the server in a daemon thread; returns ``(server, thread, base_url)``.

    ``base_url`` ends with ``/``; a task page is ``base_url + "miniwob/click-button.html"``.
    Stop with ``server.shutdown(); server.server_close()``.
    """
    directory = str(directory or miniwob_html_dir())
    handler = functools.partial(_QuietHandler, directory=directory)
    server = TaskServer((host, port), handler)
    thread = threading.Thread(target=server.serve_forever, name="taskserver", daemon=True)
    thread.start()
    h, p = server.server_address[:2]
    base_url = f"http://{h}:{p}/"
    log.info("task server on %s serving %s", base_url, directory)
    return server, thread, base_url


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m collectors.taskserver", description=__doc__.splitlines()[0]
    )
    ap.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    ap.add_argument("--port", type=int, default=8765, help="port (0 = pick a free one)")
    ap.add_argument("--dir", default=None, help="folder to serve (default: miniwob's html/)")
    args = ap.parse_args(argv)
    server, thread, url = serve(args.host, args.port, args.dir)
    print(f"serving MiniWoB++ tasks on {url}miniwob/", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        while not stop.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    server.shutdown()
    server.server_close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
