"""A probe (docs/results/performance/README.md, "Collectors"): where one collector step's CPU goes.

One context runs the expert episodes of ``dynaweb bench collect``'s five tasks (four episodes of a
task, then the next) through ``collectors.env.WebEnv`` with the default settle wait, and reports
per step: the CPU of each Chromium process type (browser, renderer, gpu-process, utility), of
Playwright's Node driver and of this Python process; the page-side observation script's own time,
measured inside the page around ``collectors/observation.js``; the Playwright protocol calls; and,
per variant, the same with the observation run twice in each evaluate (what one more observation
costs, style and layout included).  The observation is never changed.  Run from the repository
root: ``python -m evaluation.studies.probes.collect_step_cost [STEPS]``; one JSON line per variant.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
import time
from collections import Counter

import psutil

import collectors.observation as O
from collectors.agents import ExpertAgent
from collectors.browser import Browser
from collectors.env import WebEnv
from collectors.tasks import COLLECT_BENCH_TASKS
from collectors.taskserver import serve

# ``dynaweb bench collect``'s tasks
DEFAULT_TASKS = list(COLLECT_BENCH_TASKS)
CALLS: Counter = Counter()
COUNTING = [False]
OBS_MS: list[float] = []


def cpu_by_process() -> dict[str, float]:
    """CPU seconds so far of this process, the driver and each Chromium process type."""
    me = psutil.Process()
    t = me.cpu_times()
    out = {"python": t.user + t.system}
    for p in me.children(recursive=True):
        try:
            name = p.name()
            if "chrom" in name:
                m = re.search(r"--type=([a-z-]+)", " ".join(p.cmdline()))
                kind = m.group(1) if m else "browser"
            elif "node" in name:
                kind = "driver"
            else:
                continue
            t = p.cpu_times()
        except psutil.Error:
            continue
        out[kind] = out.get(kind, 0.0) + t.user + t.system
    return out


def instrument(variant: str) -> None:
    """The observation timed inside the page (``obs_ms`` in its JSON), run twice for
    ``double_observe``; Playwright's protocol messages counted."""
    obs = O.OBSERVE_JS.strip()
    twice = f"({obs})(args); " if variant == "double_observe" else ""
    O.SETTLED_OBSERVE_JS = (
        f"async (args) => {{ await ({O.SETTLE_JS.strip()})(args); {twice}"
        f"const t0 = performance.now(); const r = ({obs})(args); "
        "return r.slice(0, -1) + ',\"obs_ms\":' + (performance.now() - t0) + '}'; }"
    )
    if COUNTING[1:]:  # the wrappers are in place
        return
    COUNTING.append(True)
    from playwright._impl import transport

    send = transport.PipeTransport.send

    def counted(self, message: dict) -> None:  # noqa: ANN001 - Playwright's transport
        if COUNTING[0]:
            CALLS[str(message.get("method"))] += 1
        return send(self, message)

    transport.PipeTransport.send = counted  # type: ignore[method-assign]
    build = O.ObservationBuilder.build

    def timed_build(self, raw: dict, error: str = ""):  # noqa: ANN001, ANN202
        if "obs_ms" in raw:
            OBS_MS.append(float(raw["obs_ms"]))
        return build(self, raw, error)

    O.ObservationBuilder.build = timed_build  # type: ignore[method-assign]


async def run(steps_wanted: int, variant: str) -> dict:
    instrument(variant)
    server, _, base = serve("127.0.0.1", 0)
    browser = Browser(headless=True, allowed_origins=[base])
    await browser.start()
    env = await WebEnv(browser, base).open()
    agent, steps, seed, c0, t0 = ExpertAgent(), 0, 0, None, 0.0
    try:
        while steps < steps_wanted:
            seed += 1
            task = DEFAULT_TASKS[(seed // 4) % len(DEFAULT_TASKS)]
            obs, _ = await env.reset(task, seed)
            hist: list = []
            done = False
            while not done:
                ((a, _, _),) = await agent.act([obs], [hist], [task])
                if c0 is None and seed > 3:  # after a warm-up
                    c0, t0, steps, COUNTING[0] = cpu_by_process(), time.perf_counter(), 0, True
                    OBS_MS.clear()
                prev = obs
                obs, _, term, trunc, _ = await env.step(a)
                hist.append((prev, a))
                done, steps = term or trunc, steps + 1
        c1, dt = cpu_by_process(), time.perf_counter() - t0
        COUNTING[0] = False
    finally:
        await env.close()
        await browser.close()
        server.shutdown()
    cpu = {k: round(1000 * (c1[k] - c0.get(k, 0.0)) / steps, 2) for k in c1}
    return {
        "variant": variant,
        "steps": steps,
        "wall_ms_per_step": round(1000 * dt / steps, 1),
        "cpu_ms_per_step": cpu,
        "chromium_cpu_ms_per_step": round(
            sum(v for k, v in cpu.items() if k not in ("python", "driver")), 2
        ),
        "observation_script_ms_per_step": round(sum(OBS_MS) / max(1, len(OBS_MS)), 3),
        "protocol_calls_per_step": {k: round(v / steps, 2) for k, v in CALLS.most_common()},
    }


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 150
    for variant in ("as_is", "double_observe"):
        CALLS.clear()
        print(json.dumps(asyncio.run(run(steps, variant))), flush=True)


if __name__ == "__main__":
    main()
