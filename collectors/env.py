"""``WebEnv``: a Gymnasium-style environment over one browser context (async).

    env = WebEnv(browser, base_url, cfg.collector)
    await env.open()
    obs, info = await env.reset("miniwob/click-button", seed=3)
    obs, reward, terminated, truncated, info = await env.step(Action.click(4))

Per episode the task page is (re)loaded with ``?dw_seed=<seed>`` (which seeds
``Math.random`` before the page's own scripts run), then ``Math.seedrandom(seed)``,
``core.EPISODE_MAX_TIME = <episode_time_limit_ms>`` and ``core.startEpisodeReal()``.
The instruction is ``core.getUtterance()``; reward and done come from the
MiniWoB globals (``WOB_RAW_REWARD_GLOBAL``: 1 success, -1 wrong; ``WOB_DONE_GLOBAL``;
``WOB_REWARD_REASON``).

Page reuse: a page load costs 80-300 ms on 2 cores (vs ~10 ms to restart an
episode), so by default (``reload_each_episode=False``) the page is loaded
again only when the task changes, the page navigated elsewhere, crashed, or
every ``reload_every`` episodes; otherwise the next episode restarts on the
loaded page (as MiniWoB's own environment does).  Both give the same start
state for a (task, seed): checked over all 130 tasks.  Pass
``reload_each_episode=True`` to load the page every episode.

Episode end:
  * ``terminated``: the task ended (reward = raw reward) or the agent said ``stop``
    (reward = the raw reward if the page already ended, else 0);
  * ``truncated``: ``max_steps`` reached, the task's clock ran out (reward 0,
    ``info["timeout"]``), or the page/browser crashed (``info["crashed"]``; call
    ``restart()`` — ``reset`` does it by itself).

Actions are Playwright calls only (click -> ``page.mouse.click`` on an uncovered
point of the element when one is in view (else ``locator.click``), type ->
focus + select the field, then ``keyboard.insert_text`` (what ``locator.fill`` does;
``fill`` itself for date/colour inputs and fields not yet editable), select ->
``select_option`` by label then value (on a multi-select list it toggles that one
option), press -> ``keyboard.press`` (chords such as ``Control+a`` too), scroll ->
``mouse.wheel``, go_back -> ``page.go_back``; the element actions:
``collectors.page_actions``; hover / click_at / drag / select_text: mouse moves, presses and a
DOM selection, ``collectors.pointer_actions``); no code string is
ever built from an action.  The element is found by our id in the page's main world,
in the same evaluate that computes the click point (a Playwright locator would cost
four round trips more).  A failed action (unknown id, hidden element, time-out) does
not raise: it is reported as ``last_action_error`` in the next observation and in
``info["error"]``.

Settling (``collector.settle_ms``, default 30; 0 turns it off): the observation
after an action waits until the page has rendered a frame and its DOM has not
changed for ``settle_ms`` (at most ``settle_max_ms``), in the same evaluate that
observes, so it shows the action's settled effect rather than the outcome of a
race with the page's own timers (``info["settled_ms"]``: how long it took).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from dataclasses import dataclass
from typing import Any

from collectors.browser import Browser, close_quietly
from collectors.observation import (
    DEFAULT_BUDGET,
    OBSERVE_JS,
    ObservationBuilder,
    PageState,
    locator_for,
)
from collectors.page_actions import (
    click_element,
    fill_element,
    is_crash,
    select_option,
    short_error,
)
from collectors.pointer_actions import PointerError, perform_pointer
from collectors.tasks import TaskSpec, get_task
from core.config import CollectorConfig
from core.spaces import (
    ELEMENT_KINDS,
    Action,
    ActionParseError,
    Observation,
    parse_action,
    precheck_error,
)

log = logging.getLogger(__name__)

SCROLL_PX = 120
# app tasks: actions that may start a navigation, and how long to wait for it to start
NAVIGATING_KINDS = frozenset({"click", "press", "select", "go_back"})
NAVIGATION_GRACE_S = 0.15

# Seeds Math.random before any page script runs (so load-time randomness is fixed too).
SEED_INIT_JS = r"""
(() => {
  const m = /[?&]dw_seed=(-?\d+)/.exec(location.search);
  if (!m) return;
  let a = (parseInt(m[1], 10) ^ 0x9e3779b9) >>> 0;
  Math.random = function () {            // mulberry32
    a = (a + 0x6D2B79F5) >>> 0; let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
})();
"""

START_JS = r"""
(args) => {
  if (typeof core === 'undefined' || !core || typeof core.startEpisodeReal !== 'function') return {miniwob: false};
  Math.seedrandom(args.seed);
  core.EPISODE_MAX_TIME = args.maxTime;
  core.startEpisodeReal();
  return {miniwob: true, ready: typeof WOB_TASK_READY === 'undefined' ? true : !!WOB_TASK_READY};
}
"""

# Start the episode and, when the task is ready, observe it in the same evaluate (a reset is then
# one round trip).  Composed of two fixed functions; no action text is ever part of it.
START_OBSERVE_JS = (
    "(args) => { const s = (" + START_JS.strip() + ")(args);"
    " if (s.miniwob && !s.ready) return JSON.stringify({not_ready: true});"
    " return (" + OBSERVE_JS.strip() + ")(args); }"
)


class EpisodeOver(RuntimeError):
    pass


@dataclass
class EnvSettings:
    max_steps: int = 12
    time_limit_ms: int = 60_000
    budget: int | None = DEFAULT_BUDGET
    action_timeout_ms: int = 1500
    reload_each_episode: bool = False
    reload_every: int = 50
    extra_origins: tuple = ()
    settle_ms: float = 30.0
    settle_max_ms: float = 500.0
    app_obs_tokens: int = 768  # an app page's tree budget (collector.app_obs_tokens)
    app_tokenizer: str = "bpe"  # the tokenizer that counts it (model.tokenizer)


class WebEnv:
    """One browser context with one page, running one episode at a time."""

    def __init__(
        self,
        browser: Browser,
        base_url: str,
        cfg: CollectorConfig | None = None,
        *,
        max_steps: int | None = None,
        time_limit_ms: int | None = None,
        budget: int | None | str = "cfg",
        action_timeout_ms: int = 1500,
        reload_each_episode: bool = False,
        reload_every: int = 50,
        measure: Any = None,
        settle_ms: float | None = None,
        settle_max_ms: float | None = None,
        app_tokenizer: str | None = None,
    ):
        self.browser = browser
        self.base_url = base_url if base_url.endswith("/") else base_url + "/"
        s = EnvSettings()
        if cfg is not None:
            s.max_steps = int(cfg.max_steps)
            s.time_limit_ms = int(cfg.episode_time_limit_ms)
            s.budget = int(cfg.obs_token_budget) if cfg.obs_token_budget else None
            s.extra_origins = tuple(cfg.allowed_origins or ())
            s.settle_ms = float(cfg.settle_ms)
            s.settle_max_ms = float(cfg.settle_max_ms)
            s.app_obs_tokens = int(cfg.app_obs_tokens)
        if settle_ms is not None:
            s.settle_ms = float(settle_ms)
        if settle_max_ms is not None:
            s.settle_max_ms = float(settle_max_ms)
        if max_steps is not None:
            s.max_steps = max_steps
        if time_limit_ms is not None:
            s.time_limit_ms = time_limit_ms
        if budget != "cfg":
            s.budget = budget  # type: ignore[assignment]
        s.action_timeout_ms = action_timeout_ms
        s.reload_each_episode = reload_each_episode
        s.reload_every = reload_every
        self.settings = s
        if app_tokenizer is not None:
            s.app_tokenizer = app_tokenizer
        kw = {"measure": measure} if measure is not None else {}
        self.builder = ObservationBuilder(s.budget, strip_origin=self.base_url.rstrip("/"), **kw)
        self._measure = self.builder.measure  # MiniWoB's tree measure (app pages: model tokens)
        self.context = None
        self.page = None
        self.allow = None
        self.crashed = False
        self.restarts = 0
        self._blocked_before = 0
        self.timeouts = 0
        self.episodes = 0
        self.task: TaskSpec | None = None
        self.seed: int | None = None
        self.steps = 0
        self.done = True
        self.obs: Observation | None = None
        self.state: PageState | None = None
        self._t0 = 0.0
        self._loaded: str | None = None
        self._since_load = 0
        self.page_loads = 0
        # an app task's episode (``collectors.webapps.runtime.Episode``), None for MiniWoB's;
        # ``partition`` names this context's episode objects in an app (never shared)
        self.app_episode = None
        self.partition = uuid.uuid4().hex[:8]

    # --- lifecycle ----------------------------------------------------------------

    @property
    def blocked(self) -> int:
        """Requests/websockets/popups/downloads blocked by the allowlist (all contexts of this env)."""
        return self._blocked_before + (self.allow.blocked if self.allow else 0)

    async def open(self) -> WebEnv:
        origins = (self.base_url,) + tuple(self.settings.extra_origins)
        self.context, self.page, self.allow = await self.browser.new_page(origins)
        await self.context.add_init_script(SEED_INIT_JS)
        self.page.on("crash", self._on_crash)
        self.page.on("close", self._on_close)
        self.crashed = False
        self._loaded = None
        return self

    def _on_crash(self, _page: Any) -> None:
        log.warning("page crashed (task %s, seed %s)", self.task and self.task.name, self.seed)
        self.crashed = True

    def _on_close(self, _page: Any) -> None:
        self.crashed = True

    async def restart(self) -> None:
        """Throw the context away (and relaunch Chromium if it died); a new page."""
        self.restarts += 1
        if self.allow is not None:
            self._blocked_before += self.allow.blocked
        ctx, self.context, self.page, self.allow = self.context, None, None, None
        if ctx is not None:
            await close_quietly(ctx.close(), "browser context", timeout=5)
        await self.open()

    async def close(self) -> None:
        if self.context is not None:
            await close_quietly(self.context.close(), "browser context")
        self.context = self.page = None

    async def __aenter__(self) -> WebEnv:
        return await self.open()

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    # --- episodes -----------------------------------------------------------------

    async def reset(self, task: str | TaskSpec, seed: int = 0) -> tuple[Observation, dict]:
        spec = task if isinstance(task, TaskSpec) else get_task(task)
        if self.page is None:
            await self.open()
        elif self.crashed or self.page.is_closed():
            await self.restart()
        self.task, self.seed, self.steps, self.done = spec, int(seed), 0, False
        self.episodes += 1
        try:
            obs, st = await self._start(spec, int(seed))
        except Exception as e:
            if not (is_crash(e) or self.crashed):
                raise
            await self.restart()
            obs, st = await self._start(spec, int(seed))
        self.obs, self.state = obs, st
        self._t0 = time.monotonic()
        timings = self.app_episode.notes if self.app_episode is not None else {}
        return obs, {
            **timings,
            "task": spec.name,
            "seed": int(seed),
            "url": obs.url,
            "truncation": st.trunc,
            "blocked": self.blocked,
            "restarts": self.restarts,
        }

    async def _start(self, spec: TaskSpec, seed: int) -> tuple[Observation, PageState]:
        """Load the task page if needed, start the episode and observe it (one evaluate when the
        task is ready at once, as almost all are)."""
        self.app_episode = None
        if spec.app_task is not None:
            return await self._start_app(spec, seed)
        self.builder.strip_origin = self.base_url.rstrip("/")
        self.builder.budget = self.settings.budget
        self.builder.measure = self._measure
        self.builder.prune = None
        page = self.page
        url = spec.url(self.base_url)
        s = self.settings
        if (
            s.reload_each_episode
            or spec.reload_each_episode
            or self._loaded != url
            or page.url.split("?")[0] != url
            or (s.reload_every and self._since_load >= s.reload_every)
        ):
            await page.goto(f"{url}?dw_seed={seed}", wait_until="load")
            self._loaded = url
            self._since_load = 0
            self.page_loads += 1
        self._since_load += 1
        self.builder.next_id = 1
        raw = json.loads(
            await page.evaluate(
                START_OBSERVE_JS,
                {"seed": seed, "maxTime": int(s.time_limit_ms), "reset": True, "nextId": 1},
            )
        )
        if not raw.get("not_ready"):
            return self.builder.build(raw)
        for _ in range(40):  # some tasks load data first (up to 2 s)
            await asyncio.sleep(0.05)
            if await page.evaluate("() => !!WOB_TASK_READY"):
                break
        return await self.builder.observe(page, reset=True)

    async def _start_app(self, spec: TaskSpec, seed: int) -> tuple[Observation, PageState]:
        """An app task (``collectors.webapps``): its reset and start page, its instruction."""
        from collectors.webapps import runtime
        from collectors.webapps.prune import prune_lines, token_measure

        ep = await runtime.start(self, spec.app_task, seed)
        self.builder.strip_origin = ep.base_url  # page URLs without the app's origin
        # pruned, then cut to a budget in the model's tokens (the task's own, else the
        # collector's); no budget (``budget=None``) stays none
        s = self.settings
        budget = spec.app_task.obs_budget or s.app_obs_tokens
        self.builder.budget = None if s.budget is None or not budget else budget
        self.builder.measure = token_measure(s.app_tokenizer)
        self.builder.prune = prune_lines
        self._loaded = None  # a MiniWoB task after this one loads its page again
        self.page_loads += 1
        obs, st = await self.builder.observe(self.page, reset=True)
        obs.instruction = ep.instruction
        self.app_episode = ep
        return obs, st

    async def step(self, action: Action | str) -> tuple[Observation, float, bool, bool, dict]:
        if self.done:
            raise EpisodeOver("the episode is over; call reset()")
        if self.obs is None:
            raise EpisodeOver("call reset() first")
        self.steps += 1
        info: dict = {
            "task": self.task.name if self.task else "",
            "seed": self.seed,
            "step": self.steps,
        }
        action, error = _parsed(action)
        crashed = False
        if action is not None and not self.crashed:
            if self.app_episode is not None and action.kind in NAVIGATING_KINDS:
                crashed, error = await self._perform_following_navigation(action)
            else:
                crashed, error = await self._try_perform(action)
        obs, st = None, None
        if not crashed and not self.crashed:
            obs, st, crashed = await self._observe_after(error)
        crashed = crashed or self.crashed
        info["elapsed_ms"] = (time.monotonic() - self._t0) * 1000.0
        if crashed:
            return self._crashed_step(info)
        self.obs, self.state = obs, st
        reward, terminated, truncated, timeout = self._outcome(st, action, info)
        if self.app_episode is not None:
            reward = await self._app_outcome(obs, st, terminated, info)
        if timeout:
            self.timeouts += 1
        self.done = terminated or truncated
        info.update(
            raw_reward=st.raw_reward,
            reason=st.reason,
            timeout=timeout,
            crashed=False,
            error=error,
            truncation=st.trunc,
            blocked=self.blocked,
            timeouts=self.timeouts,
            settled_ms=st.settled_ms,
        )
        return obs, reward, terminated, truncated, info

    async def _try_perform(self, action: Action) -> tuple[bool, str]:
        """(crashed, error text) of performing ``action``; a browser failure does not raise."""
        try:
            return False, await self._perform(action)
        except Exception as e:  # noqa: BLE001 - a browser failure must not kill the loop
            if is_crash(e) or self.crashed:
                return True, ""
            return False, short_error(e)

    async def _perform_following_navigation(self, action: Action) -> tuple[bool, str]:
        """An app page's action that may navigate (a link, a form's submit button): perform it,
        and when a navigation request of the page follows within ``NAVIGATION_GRACE_S``, wait
        until the new page has loaded, so the observation shows the page the action led to
        (not the old one, a moment before it unloads)."""
        started = asyncio.Event()

        def on_request(req: Any) -> None:
            try:
                if req.is_navigation_request() and req.frame == self.page.main_frame:
                    started.set()
            except Exception:  # noqa: BLE001 - a detached frame: not the main page's navigation
                pass

        self.page.on("request", on_request)
        try:
            crashed, error = await self._try_perform(action)
            if not crashed:
                try:
                    await asyncio.wait_for(started.wait(), NAVIGATION_GRACE_S)
                except TimeoutError:
                    return crashed, error
                try:
                    await self.page.wait_for_load_state("load", timeout=15_000)
                except Exception as e:  # noqa: BLE001 - reported as the action's error
                    if is_crash(e) or self.crashed:
                        return True, ""
                    error = error or f"the page did not load: {short_error(e)}"
            return crashed, error
        finally:
            self.page.remove_listener("request", on_request)

    async def _observe_after(self, error: str) -> tuple[Observation | None, PageState | None, bool]:
        """(observation, page state, crashed) after an action, once the page settled."""
        try:
            obs, st = await self.builder.observe(self.page, error=error, settle=self._settle)
        except Exception as e:  # noqa: BLE001
            if is_crash(e) or self.crashed:
                return None, None, True
            # the page navigated while it was observed (an app page's DOM walk can also meet a
            # node the unloading document already dropped)
            if "execution context was destroyed" in str(e).lower() or self.app_episode is not None:
                return await self._observe_after_navigation(error)
            raise
        return obs, st, False

    async def _observe_after_navigation(
        self, error: str
    ) -> tuple[Observation | None, PageState | None, bool]:
        """The action started a navigation: observe once it has loaded (an app page: up to three
        tries, as a redirect can replace the page again while it is observed)."""
        tries = 3 if self.app_episode is not None else 1
        for attempt in range(tries):
            try:
                await self.page.wait_for_load_state("load", timeout=5000)
                obs, st = await self.builder.observe(self.page, error=error)
                return obs, st, False
            except Exception as e2:  # noqa: BLE001
                if is_crash(e2) or self.crashed:
                    return None, None, True
                if attempt + 1 >= tries:
                    raise
                await asyncio.sleep(0.1)
        raise AssertionError("unreachable")

    def _crashed_step(self, info: dict) -> tuple[Observation, float, bool, bool, dict]:
        """The page crashed: the episode ends truncated, on the last observation with the error."""
        self.crashed = True
        self.done = True
        prev = self.obs
        obs = Observation(
            prev.instruction,
            prev.url,
            prev.tree,
            prev.focused,
            "the page crashed",
            prev.next_id,
            list(prev.element_ids),
        )
        self.obs = obs
        info.update(
            crashed=True, error="the page crashed", timeout=False, raw_reward=0.0, reason=None
        )
        return obs, 0.0, False, True, info

    async def _app_outcome(
        self, obs: Observation, st: PageState, terminated: bool, info: dict
    ) -> float:
        """An app task's step: its instruction on the observation; when the agent said stop, the
        task's check decides the reward (an app that fails: 0, ``info["app_failure"]``)."""
        from collectors.webapps.runtime import judged

        obs.instruction = self.app_episode.instruction
        if not terminated:
            return 0.0
        reward, reason, failure = await judged(self.app_episode, obs)
        st.raw_reward, st.reason = reward, reason
        if failure:
            info["app_failure"] = failure
        return reward

    def _outcome(
        self, st: PageState, action: Action | None, info: dict
    ) -> tuple[float, bool, bool, bool]:
        """(reward, terminated, truncated, timeout) of a step (see the module docstring); notes
        ``stopped`` / ``max_steps`` in ``info``."""
        terminated = truncated = False
        reward = 0.0
        timeout = False
        if st.done:
            if st.reason == "timed out":
                timeout, truncated = True, True
            else:
                terminated, reward = True, float(st.raw_reward)
        elif action is not None and action.kind == "stop":
            terminated = True
            info["stopped"] = True
        elif info["elapsed_ms"] > self._limits[1] + 2000:
            timeout, truncated = True, True  # the page's own clock did not fire
        if not (terminated or truncated) and self.steps >= self._limits[0]:
            truncated = True
            info["max_steps"] = True
        return reward, terminated, truncated, timeout

    @property
    def _limits(self) -> tuple[int, int]:
        """(max steps, time limit ms): an app task's own, else the settings'."""
        ep = self.app_episode
        if ep is not None:
            return ep.task.max_steps, ep.task.time_limit_ms
        return self.settings.max_steps, self.settings.time_limit_ms

    @property
    def _settle(self) -> tuple[float, float] | None:
        s = self.settings
        return (s.settle_ms, s.settle_max_ms) if s.settle_ms > 0 else None

    # --- actions ------------------------------------------------------------------

    async def _perform(self, a: Action) -> str:
        """Run one action; returns an error text ('' when it worked)."""
        page = self.page
        t = self.settings.action_timeout_ms
        err = precheck_error(a, self.state.all_ids if self.state is not None else ())
        if err:
            return err
        if a.kind in ELEMENT_KINDS:
            return await self._on_element(page, a, t)
        if a.kind == "press":
            await page.keyboard.press(a.text or "")
            return ""
        if a.kind == "scroll":
            await page.mouse.wheel(0, SCROLL_PX if a.text == "down" else -SCROLL_PX)
            return ""
        if a.kind == "go_back":
            try:
                r = await page.go_back(timeout=t * 2, wait_until="load")
            except Exception as e:  # noqa: BLE001
                if is_crash(e):
                    raise
                return f"go_back failed: {short_error(e)}"
            return "" if r is not None else "there is no previous page"
        return ""  # stop

    async def _on_element(self, page: Any, a: Action, t: int) -> str:
        """An action on element ``a.element`` (click / type / select here, hover / click_at /
        drag / select_text in ``collectors.pointer_actions``); the error text ('' when it worked)."""
        loc = locator_for(page, a.element)
        try:
            if a.kind == "click":
                await click_element(page, loc, a, t)
            elif a.kind == "type":
                await fill_element(page, loc, a, t)
            elif a.kind == "select":
                await select_option(loc, a, t)
            else:
                await perform_pointer(page, loc, a, t)
        except PointerError as e:
            return str(e)
        except Exception as e:  # noqa: BLE001
            if is_crash(e) or self.crashed:
                raise
            name = type(e).__name__
            if name == "TimeoutError":
                return (
                    f"{a.kind} on [{a.element}] failed: element not visible, enabled or reachable"
                )
            return f"{a.kind} on [{a.element}] failed: {short_error(e)}"
        return ""


def _parsed(action: Action | str) -> tuple[Action | None, str]:
    """(action, error text): action text is parsed; text that does not parse is no action."""
    if isinstance(action, str):
        try:
            return parse_action(action), ""
        except ActionParseError as e:
            return None, f"invalid action: {e}"
    return action, ""
