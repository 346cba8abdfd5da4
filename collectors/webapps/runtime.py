"""How ``collectors.env.WebEnv`` runs an ``AppTask``: the episode's start and its judging.

Reset, in order: the context's cookies are cleared (a new anonymous session: no login, no
basket, no answer), the app's data is read and the parameters drawn (seeded by task and seed),
the task's own reset runs (``code`` names the episode's objects: see the app's control API),
``login`` logs the context in through the control API when the task asks for it, and the start
page is loaded.  The instruction is the task's template filled with the parameters; it replaces
the page title the observation carries.

Judging, when the agent says ``stop``: the declarative check (``collectors.webapps.taskdef``)
or the task's Python check.  An app that does not answer makes the episode a failure with the
reason (``info["app_failure"]``), and the app is restarted when its process died.
"""

from __future__ import annotations

import hashlib
import logging
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from collectors.webapps.app import AppUnavailable, WebApp, get_app
from collectors.webapps.taskdef import AppTask, call, fill, normalise_answer, resolve

log = logging.getLogger(__name__)
START_TIMEOUT_MS = 30_000  # the start page's load (a loaded machine takes seconds)


def episode_code(task: str, seed: int, partition: str) -> str:
    """Short base-36 name of an episode's objects: differs between contexts (``partition``)."""
    h = int.from_bytes(hashlib.sha256(f"{task}|{seed}|{partition}".encode()).digest()[:6], "big")
    out = ""
    for _ in range(6):
        h, r = divmod(h, 36)
        out += "0123456789abcdefghijklmnopqrstuvwxyz"[r]
    return out


@dataclass
class Episode:
    task: AppTask
    seed: int
    code: str
    params: dict
    instruction: str
    app: WebApp
    context: Any
    page: Any
    base_url: str
    final: Any = None  # the last Observation (set before judging)
    notes: dict = field(default_factory=dict)

    @property
    def request(self) -> Any:
        return self.context.request

    async def control(self, action: str, body: dict | None = None) -> dict:
        return await self.app.control(self.request, action, body)

    async def state(self) -> dict:
        """This context's state in the app (session, login, basket, answer)."""
        return await self.control("state")

    def fill(self, template: str) -> str:
        return fill(template, self.params)

    def final_path(self) -> str:
        return urlsplit(self.page.url).path if self.page is not None else ""


async def start(env: Any, task: AppTask, seed: int) -> Episode:
    """Prepare the context for an episode of ``task`` and load its start page (the caller
    observes)."""
    app = get_app(task.app)
    app.revive()
    base = app.url().rstrip("/")
    if env.allow is not None:  # the app's origin (and the task's) join this context's allowlist
        from collectors.browser import normalise_origins

        env.allow.origins |= normalise_origins([base, *task.origins])
    t0 = time.perf_counter()
    await env.context.clear_cookies()
    code = episode_code(task.name, seed, env.partition)
    data = await app.data(env.context.request)
    params = task.params(seed, data, code)
    ep = Episode(task, seed, code, params, fill(task.instruction, params), app, env.context,
                 env.page, base)  # fmt: skip
    if task.reset is not None:
        await call(resolve(task.reset), ep)
    if task.login:
        email = params.get("login_email") or (
            f"staff.{code}@dynashop.local"
            if task.login == "staff"
            else f"shopper.{code}@example.com"
        )
        await ep.control("login", {"email": email, "staff": task.login == "staff"})
    t1 = time.perf_counter()
    try:
        await env.page.goto(
            base + fill(task.start, params), wait_until="load", timeout=START_TIMEOUT_MS
        )
    except Exception as e:
        if "ERR_CONNECTION" in str(e) or "ERR_EMPTY_RESPONSE" in str(e):  # the app is down
            raise AppUnavailable(f"start page: {str(e).splitlines()[0][:160]}") from e
        raise
    # the app's state restored (cookies, the task's reset, login), then the start page loaded
    ep.notes.update(app_reset_s=t1 - t0, start_page_s=time.perf_counter() - t1)
    return ep


async def judge(ep: Episode, final: Any) -> tuple[bool, str]:
    """(success, reason) of the episode's final state."""
    ep.final = final
    chk = resolve(ep.task.check)
    if callable(chk):
        ok, reason = await call(chk, ep)
        return bool(ok), str(reason)
    return await check_declared(ep, dict(chk))


async def check_declared(ep: Episode, chk: dict) -> tuple[bool, str]:
    unknown = set(chk) - {"answer", "url", "basket", "page_contains"}
    if unknown:
        raise ValueError(f"{ep.task.name}: unknown check(s) {', '.join(sorted(unknown))}")
    state = None
    if "answer" in chk or "basket" in chk:
        state = await ep.state()
    if "answer" in chk:
        want, got = normalise_answer(ep.fill(str(chk["answer"]))), normalise_answer(state["answer"])
        if got != want:
            return False, f"answer {state['answer']!r}, expected {ep.fill(str(chk['answer']))!r}"
    if "url" in chk:
        want = urlsplit(ep.fill(str(chk["url"]))).path
        if ep.final_path() != want:
            return False, f"final page {ep.final_path()!r}, expected {want!r}"
    if "basket" in chk:
        want = {ep.fill(str(k)): int(ep.fill(str(v))) for k, v in dict(chk["basket"]).items()}
        got = {ln["upc"]: int(ln["quantity"]) for ln in state["basket"]}
        if got != want:
            return False, f"basket {got}, expected {want}"
    if "page_contains" in chk:
        text = ep.fill(str(chk["page_contains"]))
        if ep.final is None or text not in final_text(ep.final):
            return False, f"the final page does not show {text!r}"
    return True, "success"


def final_text(obs: Any) -> str:
    return "" if obs is None else f"{obs.url}\n{obs.tree}"


async def judged(ep: Episode, final: Any) -> tuple[float, str, str | None]:
    """(reward, reason, app failure or None): a failing app is a failure, never a success."""
    try:
        ok, reason = await judge(ep, final)
    except AppUnavailable as e:
        revived = False
        try:
            revived = ep.app.revive()
        except Exception as e2:  # noqa: BLE001 - reported, the episode is failed anyway
            log.warning("app %s could not be restarted: %s", ep.app.name, e2)
        why = f"app unavailable: {e}" + ("; restarted" if revived else "")
        return 0.0, why, why
    return (1.0 if ok else 0.0), reason, None
