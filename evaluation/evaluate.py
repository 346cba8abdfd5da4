"""``dynaweb eval world-model`` and ``dynaweb eval policy``.

world-model
    Fidelity of a world-model checkpoint on *held-out* real transitions: the
    run's eval topic (``topics.world_model_eval``, which the stream worker fills
    with whole episodes chosen by ``streams.state.heldout(episode_id)``; the
    trainer never trains on it), read from the beginning up to a sentinel
    (``streams.kafka.read_until_sentinel``), or a JSONL file of transitions
    (``--data``; ``--split heldout`` keeps only the episodes the worker would hold
    out, so the split is by episode, never by step).  Dreamed transitions are
    ignored.  Figures (``models.world_model.fidelity``): exact match of the
    predicted next page, line-level F1 of the change, balanced accuracy of
    reward > 0 and of done, the share of outputs that parsed (ok_rate) -- and the
    same figures for the trivial "nothing changes" baseline (page unchanged,
    reward 0, not done) side by side.  Greedy decoding, or with ``--decode rerank``
    the generated text and the proposals of ``models.world_model.candidate_outputs``
    (unchanged / emptied page, the acted-on line with a toggled state or the typed
    value, each with every reward/done trailer) scored by the model, the most
    likely kept (default: ``dream.wm_decode``, what dreams use).  Reward and done
    are what ``WorldModelRunner.predict`` returns: the reward/done heads once
    trained (``models.world_model.heads_trained``), else the text's lines; the
    result says which (``reward_source``).

policy
    A policy checkpoint acting in the live browser (``collectors.env.WebEnv`` on
    an in-process task server; no training, nothing published): per task the
    success rate with a 95 % **Wilson score interval**, the mean number of steps,
    and the model versions.  Evaluation seeds must lie outside the training
    seeds ``[collector.seed_start, collector.seed_stop)``; overlapping seeds are
    refused.  Greedy by default (``--no-greedy --temperature T`` samples).  With
    ``--dreams`` (default) and a dream topic in the run, it also prints the
    *dreamed* success of the same policy version on the same tasks and, per
    policy version, the share of dream groups with a nonzero advantage.

``--checkpoint`` is a version number, ``latest``, or a local HF directory.
Both print a table (nothing but the JSON with ``--json``) and one JSON object
on the last line.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shutil
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from core.spaces import Observation, parse_action
from streams import records

# --- checkpoints ---------------------------------------------------------------


class Loaded:
    def __init__(
        self, model: Any, tokenizer: Any, version: int | None, source: str, work: Path | None
    ):
        self.model, self.tokenizer, self.version, self.source, self.work = (
            model,
            tokenizer,
            version,
            source,
            work,
        )

    def close(self) -> None:
        if self.work is not None:
            shutil.rmtree(self.work, ignore_errors=True)


def load_checkpoint(cfg: Any, kind: str, spec: str | None) -> Loaded:
    """``spec``: a local HF directory, a version number, or 'latest' (from the run's S3 store)."""
    from models.policy import load_policy
    from models.world_model import load_world_model

    loader = load_policy if kind == "policy" else load_world_model
    spec = str(spec or "latest")
    if os.path.isdir(spec):
        d = Path(spec) / "hf" if (Path(spec) / "hf").is_dir() else Path(spec)
        model, tok = loader(str(d))
        return Loaded(model, tok, None, str(d), None)
    from core.s3 import make_client
    from models.checkpoint import CheckpointStore

    store = CheckpointStore(make_client(cfg), cfg.s3.bucket, cfg.run_id)
    if spec == "latest":
        lat = store.latest(kind)
        if lat is None:
            raise ValueError(f"run {cfg.run_id!r} has no {kind} checkpoint yet")
        version, digest = int(lat["version"]), lat.get("manifest_sha256")
    else:
        try:
            version = int(spec)
        except ValueError:
            raise ValueError(
                f"--checkpoint expects VERSION, 'latest' or a directory, got {spec!r}"
            ) from None
        if version not in store.versions(kind):
            raise ValueError(
                f"{kind} version {version} does not exist in run {cfg.run_id!r}; "
                f"see `dynaweb checkpoint list --kind {kind}`"
            )
        digest = None
    work = Path(tempfile.mkdtemp(prefix=f"dynaweb-eval-{kind}-"))
    store.download(kind, version, work / "ckpt", digest)
    model, tok = loader(str(work / "ckpt" / "hf"))
    return Loaded(model, tok, version, store.uri(kind, version), work)


# --- reading transitions ---------------------------------------------------------


def read_topic(cfg: Any, topic: str, timeout: float) -> list[records.Transition]:
    """Every transition on ``topic`` up to a sentinel (controls and bad records skipped)."""
    from streams.kafka import is_control, read_until_sentinel

    out = []
    for _m, raw in read_until_sentinel(cfg.kafka, topic, cfg.run_id, timeout=timeout):
        if raw is None or is_control(raw):
            continue
        try:
            out.append(records.decode(raw, expect="transition"))
        except records.RecordError:
            continue
    return out


def topic_exists(cfg: Any, topic: str) -> bool:
    from streams.kafka import make_consumer

    c = make_consumer(cfg.kafka)
    try:
        return topic in c.topics()
    finally:
        c.close()


def read_jsonl(path: str) -> list[records.Transition]:
    out = []
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append(records.decode(line, expect="transition"))
        except records.RecordError as e:
            raise ValueError(f"{path}:{n}: not a transition: {e}") from None
    return out


def heldout_transitions(transitions: list, fraction: float) -> list:
    """Whole episodes on the held-out side of the stream worker's split."""
    from streams.state import heldout

    return [t for t in transitions if heldout(t.episode_id, fraction)]


# --- world model -------------------------------------------------------------------


def world_model_fidelity(runner: Any, transitions: list, batch: int = 16) -> dict:
    from models.world_model import fidelity

    preds = []
    for i in range(0, len(transitions), batch):
        chunk = transitions[i : i + batch]
        preds += runner.predict(
            [Observation.from_dict(t.obs) for t in chunk], [_action(t.action) for t in chunk]
        )
    fid = fidelity(
        preds,
        [t.next_obs for t in transitions],
        [float(t.reward) for t in transitions],
        [bool(t.done) for t in transitions],
    )
    fid["episodes"] = len({t.episode_id for t in transitions})
    return fid


def _action(text: str) -> Any:
    try:
        return parse_action(text)
    except ValueError:
        return text


def eval_world_model(
    cfg: Any,
    checkpoint: str | None,
    data: str | None = None,
    split: str = "heldout",
    limit: int = 0,
    timeout: float = 60.0,
    decode: str | None = None,
) -> dict:
    from models.world_model import WorldModelRunner
    from streams.topics import Topics

    if data:
        trans = read_jsonl(data)
        source = data
        if split == "heldout":
            trans = heldout_transitions(trans, cfg.stream.heldout_fraction)
    else:
        topic = Topics(cfg.run_id, cfg.kafka.partitions).world_model_eval
        trans = read_topic(cfg, topic, timeout)
        source = topic  # the whole topic is held out (by episode) already
    seen, uniq = set(), []
    for t in trans:
        if t.source != "dream" and t.key not in seen:
            seen.add(t.key)
            uniq.append(t)
    uniq.sort(key=lambda t: (t.episode_id, t.step))
    if limit:
        uniq = uniq[:limit]
    if not uniq:
        raise ValueError(
            f"no held-out real transitions in {source}"
            + (
                " (try --split all if the file is held out already)"
                if data and split == "heldout"
                else ""
            )
        )
    ck = load_checkpoint(cfg, "world_model", checkpoint)
    try:
        runner = WorldModelRunner(
            ck.model,
            ck.tokenizer,
            cfg,
            max_positions=int(ck.model.config.max_position_embeddings),
            world_model_version=ck.version or 0,
        )
        decode = decode or runner.decode  # default: dream.wm_decode
        if decode not in ("greedy", "rerank"):
            raise ValueError(f"--decode must be greedy or rerank, got {decode!r}")
        runner.decode = decode
        from models.world_model import heads_trained

        reward_source = "heads" if heads_trained(ck.model) else "text"
        t0 = time.time()
        fid = world_model_fidelity(runner, uniq)
        fid["seconds"] = round(time.time() - t0, 2)
    finally:
        ck.close()
    return {
        "kind": "world_model",
        "checkpoint": ck.version,
        "checkpoint_source": ck.source,
        "data": source,
        "split": split if data else "heldout-topic",
        "decode": decode,
        "reward_source": reward_source,
        **fid,
    }


# --- policy --------------------------------------------------------------------


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95 % Wilson score interval of a binomial proportion (0, 1 for n = 0)."""
    if n <= 0:
        return 0.0, 1.0
    p = k / n
    den = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return max(0.0, centre - half), min(1.0, centre + half)


def parse_seed_range(spec: str) -> list[int]:
    if ":" not in spec:
        raise ValueError(f"--seeds expects A:B, got {spec!r}")
    a, b = (int(x) for x in spec.split(":", 1))
    if b <= a:
        raise ValueError(f"--seeds {spec}: empty range")
    return list(range(a, b))


def check_eval_seeds(seeds: list[int], cfg: Any) -> None:
    lo, hi = cfg.collector.seed_start, cfg.collector.seed_stop
    bad = [s for s in seeds if lo <= s < hi]
    if bad:
        raise ValueError(
            f"evaluation seeds {min(seeds)}:{max(seeds) + 1} overlap the training seeds [{lo}, {hi}) "
            f"(collector.seed_start/seed_stop; e.g. seed {bad[0]}); evaluate on seeds outside it, "
            f"e.g. --seeds {hi}:{hi + 20}"
        )


def run_live_policy(
    cfg: Any,
    runner: Any,
    tasks: list[str],
    seeds: list[int],
    greedy: bool = True,
    temperature: float = 1.0,
    contexts: int = 1,
    deadline_s: float | None = None,
) -> list[dict]:
    """One row per episode: task, seed, reward, success, steps (live browser, nothing published).

    ``deadline_s``: no episode starts later than this many seconds after Chromium is up; episodes
    still running 5 s after that are cut, and every episode not run is a row with ``error``
    ``"deadline"``."""
    import asyncio

    from collectors.browser import Browser
    from collectors.env import WebEnv
    from collectors.taskserver import serve

    server, _, base = serve()
    jobs = [(t, s) for t in tasks for s in seeds]
    rows: list[dict] = []
    started = [0.0]

    async def go() -> None:
        queue: asyncio.Queue = asyncio.Queue()
        for j in jobs:
            queue.put_nowait(j)
        async with Browser(allowed_origins=[base]) as browser:

            async def worker() -> None:
                env = WebEnv(browser, base, cfg.collector)
                await env.open()
                try:
                    while not queue.empty():
                        if deadline_s is not None and time.monotonic() - started[0] >= deadline_s:
                            return
                        task, seed = queue.get_nowait()
                        try:
                            obs, _ = await env.reset(task, seed)
                            hist: list[str] = []
                            reward, steps = 0.0, 0
                            while True:
                                a, _, _ = runner.act(
                                    [obs], [hist], temperature=temperature, greedy=greedy
                                )[0]
                                obs, reward, term, trunc, _info = await env.step(a)
                                hist.append(a.to_text())
                                steps += 1
                                if term or trunc:
                                    break
                            rows.append(
                                {
                                    "task": task,
                                    "seed": seed,
                                    "reward": float(reward),
                                    "success": reward > 0,
                                    "steps": steps,
                                    "timeout": bool(_info.get("timeout")),
                                }
                            )
                        except Exception as e:  # noqa: BLE001 - a failed episode is a row, not a crash
                            rows.append(
                                {
                                    "task": task,
                                    "seed": seed,
                                    "reward": 0.0,
                                    "success": False,
                                    "steps": 0,
                                    "error": str(e)[:200],
                                }
                            )
                            await env.restart()
                finally:
                    await env.close()

            started[0] = time.monotonic()
            work = asyncio.gather(*(worker() for _ in range(max(1, contexts))))
            try:
                await asyncio.wait_for(work, None if deadline_s is None else deadline_s + 5.0)
            except TimeoutError:  # an episode ran past the deadline: it and the rest are not scored
                pass

    try:
        asyncio.run(go())
    finally:
        server.shutdown()
        server.server_close()
    done = {(r["task"], r["seed"]) for r in rows}
    rows += [
        {"task": t, "seed": s, "reward": 0.0, "success": False, "steps": 0, "error": "deadline"}
        for t, s in jobs
        if (t, s) not in done
    ]
    return rows


def dream_summary(transitions: list) -> dict:
    """Per policy version: dreamed success per task and the nonzero-advantage share of its groups."""
    eps: dict[str, list] = defaultdict(list)
    for t in transitions:
        if t.source == "dream":
            eps[t.episode_id].append(t)
    by_v: dict[int, dict] = {}
    for steps in eps.values():
        steps.sort(key=lambda t: t.step)
        last = steps[-1]
        v = by_v.setdefault(
            int(last.policy_version),
            {"tasks": defaultdict(lambda: [0, 0]), "groups": defaultdict(set)},
        )
        ok = float(last.reward) > 0
        v["tasks"][last.task][0] += int(ok)
        v["tasks"][last.task][1] += 1
        if last.group_id:
            v["groups"][last.group_id].add(round(float(last.reward), 6))
    out = {}
    for ver, d in sorted(by_v.items()):
        groups = d["groups"]
        out[ver] = {
            "rollouts": sum(n for _, n in d["tasks"].values()),
            "success_rate": sum(k for k, _ in d["tasks"].values())
            / max(1, sum(n for _, n in d["tasks"].values())),
            "nonzero_advantage_share": (sum(len(r) > 1 for r in groups.values()) / len(groups))
            if groups
            else None,
            "tasks": {
                t: {"successes": k, "rollouts": n, "success_rate": k / n}
                for t, (k, n) in sorted(d["tasks"].items())
            },
        }
    return out


def eval_policy(
    cfg: Any,
    checkpoint: str | None,
    tasks: list[str],
    seeds: list[int],
    greedy: bool = True,
    temperature: float = 1.0,
    contexts: int = 1,
    dreams: bool = True,
    timeout: float = 60.0,
) -> dict:
    from models.policy import PolicyRunner

    check_eval_seeds(seeds, cfg)
    from collectors.tasks import get_task

    for t in tasks:
        get_task(t)  # unknown task -> a clear error before loading anything
    ck = load_checkpoint(cfg, "policy", checkpoint)
    try:
        mcfg = dataclasses.replace(
            cfg.model, max_positions=int(ck.model.config.max_position_embeddings)
        )
        runner = PolicyRunner(ck.model, ck.tokenizer, mcfg, policy_version=ck.version or 0, seed=0)
        t0 = time.time()
        eps = run_live_policy(cfg, runner, tasks, seeds, greedy, temperature, contexts)
        secs = time.time() - t0
    finally:
        ck.close()
    per_task = {}
    for t in tasks:
        rs = [r for r in eps if r["task"] == t]
        k, n = sum(r["success"] for r in rs), len(rs)
        lo, hi = wilson(k, n)
        per_task[t] = {
            "episodes": n,
            "successes": k,
            "success_rate": k / max(1, n),
            "ci95_low": round(lo, 4),
            "ci95_high": round(hi, 4),
            "mean_steps": sum(r["steps"] for r in rs) / max(1, n),
            "errors": sum(1 for r in rs if "error" in r),
        }
    k = sum(r["success"] for r in eps)
    lo, hi = wilson(k, len(eps))
    out: dict = {
        "kind": "policy",
        "checkpoint": ck.version,
        "checkpoint_source": ck.source,
        "policy_version": ck.version,
        "greedy": greedy,
        "temperature": temperature,
        "seeds": f"{min(seeds)}:{max(seeds) + 1}",
        "training_seeds": f"{cfg.collector.seed_start}:{cfg.collector.seed_stop}",
        "interval": "wilson95",
        "episodes": len(eps),
        "success_rate": k / max(1, len(eps)),
        "ci95_low": round(lo, 4),
        "ci95_high": round(hi, 4),
        "seconds": round(secs, 2),
        "tasks": per_task,
        "dreams": None,
        "timeouts": sum(1 for r in eps if r.get("timeout")),
    }
    if dreams and ck.version is not None:
        out["dreams"] = _dreams_for(cfg, ck.version, tasks, timeout)
    return out


def _dreams_for(cfg: Any, version: int, tasks: list[str], timeout: float) -> dict:
    from streams.topics import Topics

    topic = Topics(cfg.run_id, cfg.kafka.partitions).dream
    try:
        if not topic_exists(cfg, topic):
            return {"available": False, "reason": f"no topic {topic}"}
        summary = dream_summary(read_topic(cfg, topic, timeout))
    except Exception as e:  # noqa: BLE001 - optional figures; the live ones stand alone
        return {"available": False, "reason": str(e)[:200]}
    mine = summary.get(version, {})
    return {
        "available": True,
        "topic": topic,
        "policy_version": version,
        "tasks": {t: mine.get("tasks", {}).get(t) for t in tasks},
        "by_version": {
            v: {k: s[k] for k in ("rollouts", "success_rate", "nonzero_advantage_share")}
            for v, s in summary.items()
        },
    }


# --- printing and entry point --------------------------------------------------------


def format_world_model(res: dict) -> str:
    lines = [
        f"world model {res['checkpoint_source']} on {res['n']} held-out transitions "
        f"({res['episodes']} episodes, {res['data']}), {res.get('decode', 'greedy')} decoding, reward/done "
        f"from {res.get('reward_source', 'text')}",
        f"{'metric':16s} {'model':>8s} {'nothing-changes':>16s}",
    ]
    for k in ("exact_match", "change_f1", "reward_bal_acc", "done_bal_acc"):
        lines.append(f"{k:16s} {res[k]:8.3f} {res['baseline_' + k]:16.3f}")
    lines.append(f"{'ok_rate':16s} {res['ok_rate']:8.3f} {'-':>16s}")
    return "\n".join(lines)


def format_policy(res: dict) -> str:
    w = max([len(t) for t in res["tasks"]] + [4])
    dreams = (res.get("dreams") or {}).get("tasks") or {}
    mode = "greedy" if res["greedy"] else f"T={res['temperature']:g}"
    lines = [
        f"policy v{res['policy_version']} ({res['checkpoint_source']}), seeds {res['seeds']} "
        f"(training seeds {res['training_seeds']}), {mode}",
        f"{'task':<{w}}  {'eps':>4}  {'succ':>4}  {'rate':>6}  {'95% Wilson':>15}  {'steps':>5}  {'dreamed':>14}",
    ]
    for t, r in res["tasks"].items():
        d = dreams.get(t)
        ds = f"{d['success_rate']:6.1%} (n={d['rollouts']})" if d else "-"
        lines.append(
            f"{t:<{w}}  {r['episodes']:>4}  {r['successes']:>4}  {r['success_rate']:>6.1%}  "
            f"[{r['ci95_low']:5.1%}, {r['ci95_high']:5.1%}]  {r['mean_steps']:>5.1f}  {ds:>14}"
        )
    lines.append(
        f"{'all':<{w}}  {res['episodes']:>4}  {'':>4}  {res['success_rate']:>6.1%}  "
        f"[{res['ci95_low']:5.1%}, {res['ci95_high']:5.1%}]"
    )
    d = res.get("dreams") or {}
    if d.get("available"):
        for v, s in d["by_version"].items():
            nz = s["nonzero_advantage_share"]
            lines.append(
                f"dreams of policy v{v}: {s['rollouts']} rollouts, success {s['success_rate']:.1%}, "
                f"groups with nonzero advantage {'-' if nz is None else f'{nz:.1%}'}"
            )
    elif d:
        lines.append(f"dreams: not available ({d.get('reason')})")
    lines.append("intervals: 95% Wilson score intervals")
    return "\n".join(lines)


def main(args: Any, cfg: Any) -> int:
    timeout = float(getattr(args, "timeout", 60.0) or 60.0)
    if args.target == "world-model":
        res = eval_world_model(
            cfg,
            args.checkpoint,
            getattr(args, "data", None),
            getattr(args, "split", "heldout"),
            int(getattr(args, "limit", 0) or 0),
            timeout,
            getattr(args, "decode", None),
        )
        text = format_world_model(res)
    else:
        tasks = [
            t.strip() for t in (args.tasks or ",".join(cfg.collector.tasks)).split(",") if t.strip()
        ]
        tasks = [t if "/" in t else f"miniwob/{t}" for t in tasks]
        hi = cfg.collector.seed_stop
        seeds = parse_seed_range(args.seeds or f"{hi}:{hi + 20}")
        res = eval_policy(
            cfg,
            args.checkpoint,
            tasks,
            seeds,
            args.greedy,
            args.temperature,
            args.contexts,
            args.dreams,
            timeout,
        )
        text = format_policy(res)
    if not args.json:
        print(text)
    print(json.dumps(res, default=str))
    return 0
