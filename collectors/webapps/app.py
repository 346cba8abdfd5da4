"""What an application gives the suite, and the registry of applications.

An application (``WebApp``) knows where it listens (``url()``: starting or restarting its
process when it runs none), its data for the tasks' draws (``data()``), and its control API
(``control()``), which resets and checks call.  Control calls go through the browser context's
own request client (``context.request``), so they carry that context's cookies: a state read
sees exactly this context's session, basket and login, and nothing of another context's.
"""

from __future__ import annotations

from typing import Any, Protocol


class AppUnavailable(RuntimeError):
    """The application did not answer (its process died or hangs)."""


class WebApp(Protocol):
    name: str

    def url(self) -> str:
        """The base URL (``http://127.0.0.1:PORT``); starts the app when nothing serves it."""
        ...

    def revive(self) -> bool:
        """Restart the app if its process died; True when it had to."""
        ...

    async def data(self, request: Any) -> dict:
        """Lists of items the draws pick from (``{"products": [...], ...}``)."""
        ...

    async def control(self, request: Any, action: str, body: dict | None = None) -> dict:
        """One control call with this context's cookies; ``AppUnavailable`` when it fails."""
        ...


_APPS: dict[str, WebApp] = {}


def register_app(app: WebApp, replace: bool = False) -> WebApp:
    if app.name in _APPS and not replace:
        return _APPS[app.name]
    _APPS[app.name] = app
    return app


def get_app(name: str) -> WebApp:
    try:
        return _APPS[name]
    except KeyError:
        raise KeyError(f"no application {name!r} is registered ({', '.join(_APPS)})") from None
