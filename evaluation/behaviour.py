"""Before/after behaviour check: what the page readers make of the start pages of every task.

A change that only moves or splits code must not change what the experts, the random policy
and the policy's candidate enumeration decide.  ``dynaweb check-behaviour`` records that on
real pages once and compares it offline::

    dynaweb check-behaviour capture --out obs.json [--seed 0] [--tasks a,b]    # real Chromium
    dynaweb check-behaviour snapshot obs.json --out before.json               # offline
    ... change the code ...
    dynaweb check-behaviour snapshot obs.json --out after.json
    dynaweb check-behaviour compare before.json after.json                    # exit 1 if any differ
    dynaweb check-behaviour models --out models.json    # seeded model outputs (evaluation.fingerprint)
    dynaweb check-behaviour models models.json          # the code now against them: exit 1 if any differ

``capture`` starts an in-process task server and one Chromium, opens one ``WebEnv`` (the run's
``collector`` config: the default tree budget, as the collectors run) and, for every registered
task (sorted), resets with ``--seed`` and stores the start ``Observation.to_dict()``.  A task that
fails to load gets its error recorded, the env is restarted and the run goes on (exit 2).

``snapshot`` needs no browser.  Per stored observation it records

* ``candidates``    -- ``models.policy.candidates.candidate_actions(obs)`` as action texts
* ``valid_actions`` -- ``collectors.random_policy.valid_actions(obs)`` texts
* ``expert``        -- ``ALL_EXPERTS[task].act(obs, [])`` (or the exception's type and message),
  whether the task has an expert and whether it is a registered one (``EXPERTS``)
* ``page_tree``     -- ``core.pagetree.parse_tree(obs.tree)``, every ``Node``'s fields

and, compared too but reported on their own line, ``observation`` (the ``from_dict`` /
``to_dict`` / ``render`` round trip) and ``random_act`` (``RandomPolicy(seed=0)``, five draws).
Exceptions are stored as type and message only (no tracebacks: line numbers move).

``compare`` of two snapshots prints the first difference per task and kind; two capture files
compare their observations.  An extra recorded in one snapshot only (``policy_tree``, the policy's
own tree reader before ``core.pagetree`` replaced it) is listed as not compared.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import hashlib
import json
import os
import time
from collections.abc import Callable
from typing import Any

from core.config import Config

MAIN_KINDS = [
    ("candidates", "candidates"),
    ("valid_actions", "valid actions"),
    ("expert", "expert action"),
    ("page_tree", "page tree"),
]
EXTRA_KINDS = [
    ("observation", "observation round trip"),
    ("policy_tree", "policy tree"),
    ("random_act", "random act"),
]


def _err(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"


def _dump(path: str, data: Any) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f, ensure_ascii=False, indent=1, sort_keys=False)
        f.write("\n")
    os.replace(tmp, path)


def _load(path: str) -> Any:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


# --- capture ----------------------------------------------------------------------------


async def _capture_one(env: Any, task: str, seed: int, timeout: float) -> dict:
    """The start observation of ``task`` (or its error; the env is restarted after one)."""
    t0 = time.monotonic()
    rec: dict = {"task": task, "seed": seed}
    try:
        obs, info = await asyncio.wait_for(env.reset(task, seed), timeout)
        rec["obs"] = obs.to_dict()
        rec["info"] = {
            k: v for k, v in info.items() if isinstance(v, (int, float, str, bool, type(None)))
        }
    except Exception as e:  # noqa: BLE001 - record it and go on
        rec["error"] = _err(e)
        try:
            await env.restart()
        except Exception as e2:  # noqa: BLE001
            print(f"    restart failed: {_err(e2)}", flush=True)
    rec["load_s"] = round(time.monotonic() - t0, 3)
    return rec


async def capture_observations(
    cfg: Config, tasks: list[str], seed: int, timeout: float
) -> tuple[list, str]:
    """``(records, base_url)``: one record per task, in order, from one browser page."""
    from collectors.browser import Browser
    from collectors.env import WebEnv
    from collectors.taskserver import serve

    server, _, base_url = serve()
    out = []
    try:
        browser = Browser(allowed_origins=[base_url])
        await browser.start()
        try:
            env = WebEnv(browser, base_url, cfg.collector)
            await env.open()
            try:
                for i, task in enumerate(tasks):
                    rec = await _capture_one(env, task, seed, timeout)
                    if "error" in rec:
                        print(f"  [{i + 1}/{len(tasks)}] {task}: FAILED {rec['error'][:200]}")
                    out.append(rec)
                    if (i + 1) % 10 == 0:
                        print(f"  {i + 1}/{len(tasks)} tasks", flush=True)
            finally:
                await env.close()
        finally:
            await browser.close()
    finally:
        server.shutdown()
        server.server_close()
    return out, base_url


def capture(cfg: Config, out: str, seed: int = 0, tasks: str = "", timeout: float = 90.0) -> int:
    """Every task's start observation into ``out``; 0, or 2 if a task failed to load."""
    from collectors.tasks import list_tasks

    t0 = time.time()
    if tasks:
        names = [t if "/" in t else f"miniwob/{t}" for t in tasks.split(",") if t]
    else:
        names = [t.name for t in list_tasks(suite="miniwob")]
    print(f"capturing {len(names)} tasks, seed {seed}", flush=True)
    recs, base_url = asyncio.run(capture_observations(cfg, names, seed, timeout))
    failed = [r for r in recs if "error" in r]
    data = {
        "kind": "dynaweb-start-observations",
        "seed": seed,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "base_url": base_url,
        "n_tasks": len(recs),
        "n_captured": len(recs) - len(failed),
        "failed": {r["task"]: r["error"] for r in failed},
        "runtime_s": round(time.time() - t0, 1),
        "tasks": recs,
    }
    _dump(out, data)
    print(
        f"captured {len(recs) - len(failed)}/{len(recs)} tasks (seed {seed}) in "
        f"{time.time() - t0:.1f} s -> {out} ({os.path.getsize(out) / 1024:.0f} KiB)"
    )
    for r in failed:
        print(f"  failed: {r['task']}: {r['error'][:300]}")
    return 0 if not failed else 2


# --- snapshot ---------------------------------------------------------------------------


def _guard(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except Exception as e:  # noqa: BLE001
        return {"exception": _err(e)}


def _node_dict(n: Any) -> dict:
    d = {f.name: getattr(n, f.name) for f in dataclasses.fields(n)}
    return json.loads(json.dumps(d, ensure_ascii=False, default=repr))


def _expert_row(task: str, obs: Any) -> dict:
    from collectors.experts import ALL_EXPERTS, EXPERTS

    ex = ALL_EXPERTS.get(task)
    row: dict = {"has_expert": ex is not None, "verified": task in EXPERTS}
    if ex is not None:
        row["name"] = getattr(ex, "name", None)
        try:
            row["action"] = ex.act(obs, []).to_text()
        except Exception as e:  # noqa: BLE001
            row["exception"] = _err(e)
    return row


def snapshot_row(task: str, obs_dict: dict) -> dict:
    """What the readers make of one start observation (see the module doc)."""
    from collectors.random_policy import RandomPolicy, valid_actions
    from core.pagetree import parse_tree
    from core.spaces import Observation
    from models.policy.candidates import candidate_actions

    obs = Observation.from_dict(obs_dict)

    def random_act() -> list[str]:
        rp = RandomPolicy(seed=0)
        return [rp.act(obs, []).to_text() for _ in range(5)]

    return {
        "observation": _guard(lambda: {"dict": obs.to_dict(), "render": obs.render()}),
        "candidates": _guard(lambda: [a.to_text() for a in candidate_actions(obs)]),
        "valid_actions": _guard(lambda: [a.to_text() for a in valid_actions(obs)]),
        "expert": _expert_row(task, obs),
        "page_tree": _guard(lambda: [_node_dict(n) for n in parse_tree(obs.tree)]),
        "random_act": _guard(random_act),
    }


def snapshot(obs_path: str, out: str) -> int:
    """The readers' view of every observation of a capture file, into ``out``."""
    t0 = time.time()
    src = _load(obs_path)
    rows = {}
    for rec in src["tasks"]:
        if "obs" in rec:
            rows[rec["task"]] = snapshot_row(rec["task"], rec["obs"])
        else:
            rows[rec["task"]] = {"capture_error": rec.get("error", "no observation")}
    with open(obs_path, "rb") as f:
        sha1 = hashlib.sha1(f.read()).hexdigest()
    n_exp = sum(1 for r in rows.values() if r.get("expert", {}).get("has_expert"))
    n_ver = sum(1 for r in rows.values() if r.get("expert", {}).get("verified"))
    data = {
        "kind": "dynaweb-behaviour-snapshot",
        "obs_file": os.path.abspath(obs_path),
        "obs_sha1": sha1,
        "seed": src.get("seed"),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "n_tasks": len(rows),
        "n_with_obs": sum(1 for r in rows.values() if "capture_error" not in r),
        "n_with_expert": n_exp,
        "n_verified_expert": n_ver,
        "tasks": rows,
    }
    _dump(out, data)
    print(
        f"snapshot of {len(rows)} tasks ({data['n_with_obs']} with an observation; {n_exp} with an "
        f"expert in ALL_EXPERTS, {n_ver} registered in EXPERTS) in {time.time() - t0:.1f} s "
        f"-> {out} ({os.path.getsize(out) / 1024:.0f} KiB)"
    )
    for key, _ in MAIN_KINDS + EXTRA_KINDS:
        bad = [t for t, r in rows.items() if isinstance(r.get(key), dict) and "exception" in r[key]]
        if bad and key != "expert":
            print(f"  {key}: exception on {len(bad)} tasks: {bad[:5]}")
    raised = [t for t, r in rows.items() if "exception" in r.get("expert", {})]
    if raised:
        print(f"  expert raised on {len(raised)} tasks: {raised[:5]}")
    return 0


# --- compare ----------------------------------------------------------------------------


def _short(x: Any, n: int = 160) -> str:
    s = json.dumps(x, ensure_ascii=False)
    return s if len(s) <= n else s[: n - 3] + "..."


def first_diff(a: Any, b: Any, path: str = "") -> str:
    """Where ``a`` and ``b`` first differ (a path into them, and the two values there)."""
    if type(a) is not type(b):
        return f"{path or '.'}: {_short(a)} != {_short(b)}"
    if isinstance(a, dict):
        for k in list(a) + [k for k in b if k not in a]:
            if k not in a:
                return f"{path}.{k}: missing in A (B: {_short(b[k])})"
            if k not in b:
                return f"{path}.{k}: missing in B (A: {_short(a[k])})"
            if a[k] != b[k]:
                return first_diff(a[k], b[k], f"{path}.{k}")
        return ""
    if isinstance(a, list):
        for i, (x, y) in enumerate(zip(a, b, strict=False)):
            if x != y:
                return first_diff(x, y, f"{path}[{i}]")
        if len(a) != len(b):
            extra = a[len(b) :] if len(a) > len(b) else b[len(a) :]
            return f"{path or '.'}: length {len(a)} != {len(b)} (extra: {_short(extra)})"
        return ""
    return f"{path or '.'}: {_short(a)} != {_short(b)}"


def _print_diffs(label: str, diffs: list[tuple[str, str]], show: int) -> None:
    if not diffs:
        return
    print(f"{label}: {len(diffs)} tasks differ")
    for t, d in diffs[:show]:
        print(f"  {t}: {d}")
    if len(diffs) > show:
        print(f"  ... and {len(diffs) - show} more: {', '.join(t for t, _ in diffs[show:])}")


def _task_set_differences(ta: dict, tb: dict) -> int:
    """Tasks in one snapshot only, or whose capture error differs (printed); their count."""
    tasks = sorted(set(ta) | set(tb))
    only = [t for t in tasks if (t in ta) != (t in tb)]
    for t in only:
        print(f"  task {t} only in {'A' if t in ta else 'B'}")
    cap = [
        t
        for t in tasks
        if t in ta and t in tb and ta[t].get("capture_error") != tb[t].get("capture_error")
    ]
    for t in cap:
        print(
            f"  task {t}: capture error differs: "
            f"{ta[t].get('capture_error')!r} vs {tb[t].get('capture_error')!r}"
        )
    return len(only) + len(cap)


def compare_snapshots(a_path: str, b_path: str, A: dict, B: dict, show: int = 5) -> int:
    """0 if every kind of every task is identical, else 1 (differences printed)."""
    ta, tb = A["tasks"], B["tasks"]
    tasks = sorted(set(ta) | set(tb))
    for tag, path, d in (("A", a_path, A), ("B", b_path, B)):
        print(f"{tag}: {path} (seed {d.get('seed')})")
    if A.get("obs_sha1") != B.get("obs_sha1"):
        print(
            "NOTE: the two snapshots were made from different observation files "
            f"({A.get('obs_file')} vs {B.get('obs_file')})"
        )
    bad = _task_set_differences(ta, tb)
    results: dict[str, list] = {}
    skipped = []
    for key, label in MAIN_KINDS + EXTRA_KINDS:
        if (key, label) in EXTRA_KINDS and any(
            not any(key in r for r in side.values()) for side in (ta, tb)
        ):
            skipped.append(label)
            continue
        diffs = []
        for t in tasks:
            a, b = ta.get(t, {}).get(key), tb.get(t, {}).get(key)
            if a != b:
                diffs.append((t, first_diff(a, b)))
        results[key] = diffs
        bad += len(diffs)
        _print_diffs(label, diffs, show)
    n = len(tasks)

    def line(kinds: list) -> str:
        return ", ".join(
            f"{label} identical {n - len(results[k])}/{n}" for k, label in kinds if k in results
        )

    print(f"extras: {line(EXTRA_KINDS)}")
    for label in skipped:
        print(f"extras: {label} not compared (recorded in one snapshot only)")
    print(f"{n} tasks: {line(MAIN_KINDS)}")
    print(f"DIFFERENT ({bad} differences)" if bad else "IDENTICAL")
    return 1 if bad else 0


def compare_observations(a_path: str, b_path: str, A: dict, B: dict, show: int = 5) -> int:
    """Two capture files: the start observations (and capture errors), task by task."""
    ta = {r["task"]: r for r in A["tasks"]}
    tb = {r["task"]: r for r in B["tasks"]}
    tasks = sorted(set(ta) | set(tb))
    print(f"A: {a_path} (seed {A.get('seed')}, {A.get('n_captured')}/{A.get('n_tasks')} captured)")
    print(f"B: {b_path} (seed {B.get('seed')}, {B.get('n_captured')}/{B.get('n_tasks')} captured)")
    diffs = []
    for t in tasks:
        a, b = ta.get(t), tb.get(t)
        ka = None if a is None else {"obs": a.get("obs"), "error": a.get("error")}
        kb = None if b is None else {"obs": b.get("obs"), "error": b.get("error")}
        if ka != kb:
            diffs.append((t, first_diff(ka, kb)))
    _print_diffs("start observation", diffs, show)
    print(f"{len(tasks)} tasks: start observation identical {len(tasks) - len(diffs)}/{len(tasks)}")
    print("DIFFERENT" if diffs else "IDENTICAL")
    return 1 if diffs else 0


def compare(a_path: str, b_path: str, show: int = 5) -> int:
    A, B = _load(a_path), _load(b_path)
    if A.get("kind") == B.get("kind") == "dynaweb-start-observations":
        return compare_observations(a_path, b_path, A, B, show)
    return compare_snapshots(a_path, b_path, A, B, show)


def main(args: argparse.Namespace, cfg: Config) -> int:
    """``dynaweb check-behaviour capture|snapshot|compare``."""
    files = list(args.files or [])
    if args.action == "models":
        from evaluation.fingerprint import main as models_main

        return models_main(args)
    if args.action == "capture":
        if files or not args.out:
            raise ValueError("check-behaviour capture takes no file, and needs --out FILE")
        return capture(cfg, args.out, args.seed, args.tasks or "", args.timeout)
    if args.action == "snapshot":
        if len(files) != 1 or not args.out:
            raise ValueError("check-behaviour snapshot needs one capture file and --out FILE")
        return snapshot(files[0], args.out)
    if len(files) != 2:
        raise ValueError("check-behaviour compare needs two files")
    return compare(files[0], files[1], args.show)
