"""``dynaweb bench dream`` and ``dynaweb bench train``: throughput of the learning core.

dream
    Start states are the real first pages of *every* task that has a scripted
    expert (``collectors.experts.ALL_EXPERTS``), produced by ``collectors.env.WebEnv``
    at ``reset`` (seed = ``CollectorConfig.seed_stop``, i.e. outside the training
    range) and cached in ``<home>/bench/start_states.jsonl`` (``--starts FILE``
    reads any JSONL of observation dicts instead).  Models are the from-config
    ones (``ModelConfig``; the weights do not change the cost, only the lengths of
    what the world model writes, see below).  Figures:

    * ``dream_steps_per_s_b1``: ``dream_rollouts`` with ``batch=1`` (one rollout
      stepped at a time), G = ``DreamConfig.group_size`` rollouts per start;
    * ``dream_steps_per_s_b16``: the same rollouts advanced 16 at a time (what the
      dream generator does: ``batch // group_size`` start states per round);
    * ``dream_steps_per_s_b16_distinct_pages``: 16 rollouts from 16 distinct start
      pages (G = 1) advanced together: batching without any shared page;
    * ``policy_tokens_per_s``: prompt + candidate tokens that ``PolicyRunner.act``
      scores per second (the logical work: every prompt token and every token of
      every candidate), acting alone on 16 *distinct* start pages;
      ``policy_model_tokens_per_s``: tokens actually run through the model (after
      trie sharing of candidate prefixes);
    * ``prompt_tokens_p95``: 95th percentile of the policy prompt length (tokens).

    The world model is from config (untrained) so that what it writes has no
    meaning; to make b1 and b16 comparable both runs use the same fixed
    generation length (``--wm-tokens``, default 48, ~ the length of a typical
    small change) by ignoring eos, and greedy decoding.  What an untrained model
    writes rarely parses, so dreamed pages mostly stay the start page: the G
    rollouts of a group then share their whole page (the best case for the
    shared-prefix passes of ``PolicyRunner``/``WorldModelRunner``; with a trained
    world model the pages of a group share the instruction and the page down to
    the first changed line).  ``dream_steps_per_s_b16_distinct_pages`` is the case
    with nothing shared.

train
    The trainer's own updates (``policy_update`` / ``world_model_update``: loss +
    DeepSpeed step, in micro-batches of ``trainer.chunk_rows`` / ``wm_chunk_rows``)
    on batches of the stream worker's shape (``StreamConfig.batch_trajectories``
    trajectories, half expert, half one dream group with behaviour log-probs,
    horizon steps each) and on ``TrainerConfig.wm_batch`` transitions.  Figures:
    trajectories/s, transitions/s, peak RSS of the process (MiB), and how far the
    resident set grows above its level during each phase's steps (sampled every
    20 ms): that is what chunking lowers.

    It runs twice in one process on the same batches, first with the configured
    tokenizer (``model.tokenizer``; its figures are the top-level keys), then with
    the other: ``tokenizers: {"bpe": {...}, "byte": {...}}`` holds, per tokenizer,
    the vocabulary, tokens per transition (policy prompt fitted to
    ``max_positions`` + action + eos; world-model prompt + change target + eos;
    ``*_full``: the same texts unfitted) and the throughput figures;
    ``tokens_per_transition_ratio`` (byte / BPE) and ``bpe_speedup`` (BPE rate /
    byte rate) compare them.

``train --ranks N``: the data-parallel trainer against one rank on the same batches
(``evaluation.bench.train_ranks``: ``rank_update_max_abs_diff``, ``samples_per_s_1`` / ``_N``).

Both print a table (or nothing but the JSON with ``--json``) and one JSON object
on the last line.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import resource
import time
from pathlib import Path
from typing import Any

import torch

from core.config import Config
from core.spaces import Observation
from evaluation.bench.synthetic import synthetic_batch
from evaluation.operations import BrokerFactory, StackFactory


def _p95(xs: list[int]) -> int:
    if not xs:
        return 0
    s = sorted(xs)
    return int(s[min(len(s) - 1, math.ceil(0.95 * len(s)) - 1)])


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


# --- start states --------------------------------------------------------------


def live_start_states(
    cfg: Config, tasks: list[str] | None = None, seed: int | None = None
) -> list[dict]:
    """First observation (at ``reset``) of each task, from the live browser env."""
    import asyncio

    from collectors.browser import Browser
    from collectors.env import WebEnv
    from collectors.experts import ALL_EXPERTS
    from collectors.taskserver import serve

    tasks = tasks or sorted(ALL_EXPERTS)
    seed = cfg.collector.seed_stop if seed is None else seed
    server, _, base = serve()

    async def go() -> list[dict]:
        out = []
        async with Browser(allowed_origins=[base]) as browser:
            env = WebEnv(browser, base, cfg.collector, app_tokenizer=cfg.model.tokenizer)
            await env.open()
            try:
                for t in tasks:
                    obs, _ = await env.reset(t, seed)
                    out.append({"task": t, "seed": seed, "obs": obs.to_dict()})
            finally:
                await env.close()
        return out

    try:
        return asyncio.run(go())
    finally:
        server.shutdown()
        server.server_close()


def start_states(cfg: Config, path: str | None = None) -> list[dict]:
    """``[{task, seed, obs}]`` from ``path`` (JSONL), else the cached live start pages."""
    if path:
        rows = [json.loads(x) for x in Path(path).read_text().splitlines() if x.strip()]
        return [r if "obs" in r else {"task": r.get("task", ""), "seed": 0, "obs": r} for r in rows]
    cache = Path(cfg.home) / "bench" / "start_states.jsonl"
    if cache.exists():
        return start_states(cfg, str(cache))
    rows = live_start_states(cfg)
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return rows


# --- dream ---------------------------------------------------------------------


class TimedPolicy:
    """A ``PolicyRunner`` whose ``act_info`` time is added up (the dream's policy share)."""

    def __init__(self, runner: Any):
        self.runner, self.seconds = runner, 0.0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.runner, name)

    def act_info(self, *a: Any, **k: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return self.runner.act_info(*a, **k)
        finally:
            self.seconds += time.perf_counter() - t0


def _dream_cost(steps: int, secs: float, policy_s: float) -> dict:
    """Where a dream step's time goes (policy acting, world-model prefill, world-model decode,
    the rest) and its tokens (world-model prompt and generated tokens per step)."""
    from models.world_model.decoding import PHASES

    rest = secs - policy_s - PHASES.prefill_s - PHASES.decode_s
    share = lambda x: round(x / max(secs, 1e-9), 3)  # noqa: E731
    return {
        "share": {
            "policy": share(policy_s),
            "wm_prefill": share(PHASES.prefill_s),
            "wm_decode": share(PHASES.decode_s),
            "other": share(rest),
        },
        "ms_per_step": round(1000 * secs / max(1, steps), 2),
        "wm_prompt_tokens_per_step": round(PHASES.prefill_tokens / max(1, steps), 1),
        "wm_generated_tokens_per_step": round(PHASES.decode_tokens / max(1, steps), 1),
        "wm_decode_tokens_per_s": round(PHASES.decode_tokens / max(PHASES.decode_s, 1e-9), 1),
    }


def bench_dream(cfg: Config, starts: list[dict], wm_tokens: int = 48, rounds: int = 1) -> dict:
    from models.dream.env import dream_rollouts
    from models.lm.prompts import policy_prompt_ids
    from models.lm.saved import make_model
    from models.policy.model import Policy
    from models.policy.runner import PolicyRunner
    from models.world_model.decoding import PHASES
    from models.world_model.model import WorldModel

    from .runners import FixedLengthRunner

    torch.set_num_threads(cfg.threads)
    torch.set_flush_denormal(True)  # as core.process does for the trainer component
    obs = [Observation.from_dict(s["obs"]) for s in starts]
    pol, ptok = make_model(Policy, cfg.model)
    wm, wtok = make_model(WorldModel, cfg.model)
    pr = PolicyRunner(pol, ptok, cfg.model, seed=0)
    timed = TimedPolicy(pr)
    wr = FixedLengthRunner(
        wm, wtok, cfg.dream, cfg.model.max_positions, max_change_tokens=wm_tokens
    )
    G, H = cfg.dream.group_size, cfg.dream.horizon
    per_round = max(1, 16 // G)
    lens = [len(policy_prompt_ids(ptok, o, [], cfg.model.max_positions)) for o in obs]

    def run(batch: int, k0: int, n_starts: int = per_round, group: int = G) -> tuple[int, float]:
        sel = [obs[(k0 + i) % len(obs)] for i in range(n_starts)]
        t0 = time.perf_counter()
        ros = dream_rollouts(
            timed, wr, sel, group, H, temperature=cfg.dream.temperature, batch=batch
        )
        return sum(len(r) for r in ros), time.perf_counter() - t0

    run(16, 0)  # warm-up (allocator, first-call overheads)
    res = {}
    for b in (1, 16):
        steps, secs = 0, 0.0
        PHASES.reset()
        timed.seconds = 0.0
        for r in range(rounds):
            s, t = run(b, r * per_round)
            steps, secs = steps + s, secs + t
        res[b] = (steps, secs)
    where = _dream_cost(steps, secs, timed.seconds)  # of the batch-16 rounds
    # 16 rollouts from 16 distinct pages (G = 1): what batching gives without any shared page
    steps, secs = run(16, 3, n_starts=16, group=1)
    distinct = steps / secs
    # policy alone: 16 distinct pages, first step
    from models.lm.prompts import action_ids
    from models.policy.candidates import candidate_actions

    pages = [obs[i % len(obs)] for i in range(16)]
    logical = sum(
        len(policy_prompt_ids(ptok, o, [], cfg.model.max_positions))
        + sum(len(action_ids(ptok, a.to_text())) for a in candidate_actions(o))
        for o in pages
    )
    pr.stats = {"tokens": 0}
    t0 = time.perf_counter()
    pr.act(pages, [[] for _ in pages], temperature=1.0)
    pt = time.perf_counter() - t0
    b1 = res[1][0] / res[1][1]
    b16 = res[16][0] / res[16][1]
    return {
        "dream_steps_per_s_b1": round(b1, 3),
        "dream_steps_per_s_b16": round(b16, 3),
        "b16_over_b1": round(b16 / b1, 3),
        "dream_steps_per_s_b16_distinct_pages": round(distinct, 3),
        "dream_cost_b16": where,
        "policy_tokens_per_s": round(logical / pt, 1),
        "policy_model_tokens_per_s": round(pr.stats["tokens"] / pt, 1),
        "policy_ms_per_page": round(1000 * pt / len(pages), 1),
        "prompt_tokens_p95": _p95(lens),
        "start_states": len(obs),
        "group_size": G,
        "horizon": H,
        "wm_tokens": wm_tokens,
        "rounds": rounds,
        "threads": cfg.threads,
        "model": f"{cfg.model.layers}x{cfg.model.d_model}",
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }


# --- train ---------------------------------------------------------------------


def _single_action_pass(model: Any, tok: Any, trajs: list, cfg: Config) -> None:
    """Forward + backward of each step's chosen action tokens only (the policy objective before it
    became pi_T over the candidate set), in the trainer's micro-batches; gradients dropped."""
    from models.lm.scoring import continuation_logprobs
    from models.lm.tokenizer import pad_id
    from models.policy.decisions import trajectory_rows

    rows = [r for t in trajs for r in trajectory_rows(tok, t.steps(), cfg.model.max_positions)]
    n = max(1, cfg.trainer.chunk_rows or len(rows))
    for i in range(0, len(rows), n):
        lps = continuation_logprobs(model, rows[i : i + n], pad_id(tok))
        torch.stack([lp.sum() for lp in lps]).sum().backward()
    model.zero_grad(set_to_none=True)


def _mfu_figures(p: dict, w: dict) -> dict:
    """Model FLOPs on unpadded unique tokens / the best sgemm rate at this thread count."""
    return {
        "mfu_policy": round(p["mfu"], 4),
        "mfu_world_model": round(w["mfu"], 4),
        "policy_model_gflops_per_s": round(p["model_flops_per_s"] / 1e9, 3),
        "world_model_model_gflops_per_s": round(w["model_flops_per_s"] / 1e9, 3),
        "policy_train_tokens_per_s": round(p["tokens_per_s"], 1),
        "world_model_train_tokens_per_s": round(w["tokens_per_s"], 1),
    }


def _backbones(pol: Any, wm: Any, tok: Any) -> dict:
    """The backbones' classes, their sizes and the vocabulary (a GGUF or HF model brings its own)."""
    return {
        "backbone": type(pol.lm).__name__,
        "world_model_backbone": type(wm.lm).__name__,
        "policy_parameters": sum(p.numel() for p in pol.parameters()),
        "world_model_parameters": sum(p.numel() for p in wm.parameters()),
        "vocab": len(tok),
    }


def bench_train(cfg: Config, starts: list[dict], steps: int = 3, peak: dict | None = None) -> dict:
    from evaluation.bench.collect import MemorySampler
    from evaluation.bench.mfu import FlopMeter, mfu, sgemm_peak
    from models.lm.saved import make_model
    from models.lm.tokenizer import pad_id
    from models.policy.model import Policy
    from models.train.engine import trainer_engine
    from models.train.learner import policy_update, world_model_update
    from models.world_model.model import WorldModel

    torch.set_num_threads(cfg.threads)
    torch.set_flush_denormal(True)  # as core.process does for the trainer component
    obs = [Observation.from_dict(s["obs"]) for s in starts]
    embedder = None
    if cfg.trainer.infonce_weight > 0:
        from models.lm.embedder import default_embedder

        embedder = default_embedder()
    rss0 = _peak_rss_mib()
    pol, tok = make_model(Policy, cfg.model)
    wm, wtok = make_model(WorldModel, cfg.model)
    pe = trainer_engine(pol, cfg.trainer, "policy")
    we = trainer_engine(wm, cfg.trainer, "world_model")
    batches = [synthetic_batch(cfg, obs, k * 7) for k in range(steps + 1)]

    p_stats: list[dict] = []

    def p_step(trajs: list) -> None:  # what the trainer's policy step does
        pe.train()
        p_stats.append(policy_update(pe, tok, trajs, cfg.trainer, cfg.model)[1])

    def w_step(trans: list) -> None:
        we.train()
        world_model_update(we, wtok, trans, cfg.trainer, embedder, cfg.dream.max_change_tokens)

    p_step(batches[0][0])  # warm-up
    w_step(batches[0][1])
    t0 = time.perf_counter()
    n_traj = n_steps = 0
    p_meter = FlopMeter(pol, pad_id(tok))
    with MemorySampler(every=0.02) as mem_p, p_meter:  # the resident set while the policy steps run
        base_p = mem_p.peak_mb
        for trajs, _ in batches[1:]:
            p_step(trajs)
            n_traj += len(trajs)
            n_steps += sum(len(t.steps()) for t in trajs)
    tp = time.perf_counter() - t0
    rss_p = _peak_rss_mib()
    t0 = time.perf_counter()
    for trajs, _ in batches[1:]:  # the old objective: the chosen action's tokens, no step
        _single_action_pass(pol, tok, trajs, cfg)
    t_single = time.perf_counter() - t0
    cand = p_stats[1:]
    t0 = time.perf_counter()
    n_tr = 0
    w_meter = FlopMeter(wm, pad_id(wtok))
    with MemorySampler(every=0.02) as mem_w, w_meter:
        base_w = mem_w.peak_mb
        for _, trans in batches[1:]:
            w_step(trans)
            n_tr += len(trans)
    tw = time.perf_counter() - t0
    peak = peak or sgemm_peak([pol, wm])
    figures = _mfu_figures(
        mfu(p_meter, tp, peak["peak_flops"]), mfu(w_meter, tw, peak["peak_flops"])
    )
    return {
        **figures,
        **_backbones(pol, wm, tok),
        "policy_tokens_per_s": figures["policy_train_tokens_per_s"],
        "peak_gflops": round(peak["peak_flops"] / 1e9, 3),
        "peak": peak,
        "policy_trajectories_per_s": round(n_traj / tp, 3),
        "policy_steps_per_s": round(n_steps / tp, 3),
        "policy_s_per_batch": round(tp / steps, 3),
        "world_model_transitions_per_s": round(n_tr / tw, 3),
        "world_model_s_per_batch": round(tw / steps, 3),
        "peak_rss_mib": round(_peak_rss_mib(), 1),
        "peak_rss_mib_before_models": round(rss0, 1),
        "peak_rss_mib_after_policy": round(rss_p, 1),
        "batch_trajectories": cfg.stream.batch_trajectories,
        "wm_batch": cfg.trainer.wm_batch,
        "horizon": cfg.dream.horizon,
        "zero_stage": cfg.trainer.zero_stage,
        "steps": steps,
        "chunk_rows": cfg.trainer.chunk_rows,
        "wm_chunk_rows": cfg.trainer.wm_chunk_rows,
        # growth of the resident set over its level at the start of each phase (the step's graph)
        "policy_step_rss_growth_mib": round(mem_p.peak_mb - base_p, 1),
        "world_model_step_rss_growth_mib": round(mem_w.peak_mb - base_w, 1),
        # the policy scores every candidate of every step (pi_T over C(s)); the single-action pass
        # (forward + backward of the chosen action's tokens only, the objective before) for scale
        "policy_candidates_per_step": round(sum(c["cand_per_step"] for c in cand) / len(cand), 2),
        "policy_candidate_rows_per_step": round(
            sum(c["cand_rows"] for c in cand) / max(1, n_steps), 2
        ),
        "policy_single_action_s_per_batch": round(t_single / steps, 3),
        "threads": cfg.threads,
        "model": cfg.model.policy_path or f"{cfg.model.layers}x{cfg.model.d_model}",
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }


def tokens_per_transition(cfg: Config, tok: Any, obs: list[Observation], steps: int = 3) -> dict:
    """Mean tokens per transition of ``bench_train``'s batches with ``tok``: the policy's rows (prompt
    fitted to ``max_positions`` + action + eos, ``trajectory_rows``) and the world model's (prompt +
    change target + eos, ``_wm_rows``), as trained; ``*_full``: the same texts before any fitting."""
    from models.lm.prompts import policy_prompt, world_model_prompt
    from models.lm.tokenizer import encode
    from models.policy.decisions import trajectory_rows
    from models.world_model.loss import _wm_rows
    from models.world_model.outputs import change_target

    mp = cfg.model.max_positions
    pol = pol_full = n_pol = wm = wm_full = n_wm = 0
    for k in range(steps + 1):
        trajs, trans = synthetic_batch(cfg, obs, k * 7)
        for t in trajs:
            st = t.steps()
            for (p, a), (j, s) in zip(trajectory_rows(tok, st, mp), enumerate(st), strict=True):
                pol += len(p) + len(a)
                hist = [x.action for x in st[:j]]
                pol_full += len(
                    encode(tok, policy_prompt(Observation.from_dict(s.obs), hist))
                ) + len(a)
                n_pol += 1
        rows, _, _ = _wm_rows(tok, trans, mp, cfg.dream.max_change_tokens)
        wm += sum(len(p) + len(c) for p, c in rows)
        for t in trans:
            o, nx = Observation.from_dict(t.obs), Observation.from_dict(t.next_obs)
            wm_full += len(encode(tok, world_model_prompt(o, t.action)))
            wm_full += len(encode(tok, change_target(o, nx, t.reward, t.done))) + 1
        n_wm += len(trans)
    return {
        "vocab": len(tok),
        "policy_tokens_per_transition": round(pol / max(1, n_pol), 1),
        "world_model_tokens_per_transition": round(wm / max(1, n_wm), 1),
        "policy_tokens_per_transition_full": round(pol_full / max(1, n_pol), 1),
        "world_model_tokens_per_transition_full": round(wm_full / max(1, n_wm), 1),
    }


TOKENIZER_KEYS = (
    "policy_trajectories_per_s",
    "policy_steps_per_s",
    "policy_s_per_batch",
    "world_model_transitions_per_s",
    "world_model_s_per_batch",
    "policy_step_rss_growth_mib",
    "world_model_step_rss_growth_mib",
    "mfu_policy",
    "mfu_world_model",
    "policy_model_gflops_per_s",
    "world_model_model_gflops_per_s",
    "load_avg_1m",
)  # per run (the peak RSS is the process's)


def bench_train_tokenizers(cfg: Config, starts: list[dict], steps: int = 3) -> dict:
    """``bench_train`` with the configured tokenizer (its figures stay the top-level keys), then with
    the other one, in the same process on the same batches: ``tokenizers: {bpe: {...}, byte: {...}}``
    (tokens per transition and throughput each) and ``tokens_per_transition_ratio`` (byte / bpe)."""
    from models.lm.tokenizer import KINDS, build_tokenizer

    if cfg.model.policy_path or cfg.model.world_model_path:  # the models bring their tokenizers
        res = bench_train(cfg, starts, steps)
        res["tokenizer"] = "the model's own"
        return res
    obs = [Observation.from_dict(s["obs"]) for s in starts]
    first = cfg.model.tokenizer
    res: dict = {}
    per: dict = {}
    peak = None  # measured once, in the first run
    for kind in [first] + [k for k in KINDS if k != first]:
        c = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, tokenizer=kind))
        r = bench_train(c, starts, steps, peak)
        peak = r["peak"]
        if kind == first:
            res = r
        per[kind] = {
            **tokens_per_transition(c, build_tokenizer(kind), obs, steps),
            **{k: r[k] for k in TOKENIZER_KEYS if k in r},
        }
    res["tokenizer"] = first
    res["tokenizers"] = per
    b, p = per.get("byte", {}), per.get("bpe", {})
    if b and p:
        res["tokens_per_transition_ratio"] = {
            k: round(b[k] / max(1e-9, p[k]), 3)
            for k in (
                "policy_tokens_per_transition",
                "world_model_tokens_per_transition",
                "policy_tokens_per_transition_full",
                "world_model_tokens_per_transition_full",
            )
        }
        res["bpe_speedup"] = {
            k: round(p[k] / max(1e-9, b[k]), 3)
            for k in ("policy_trajectories_per_s", "world_model_transitions_per_s")
        }
    return res


# --- entry point ------------------------------------------------------------------


def _print(res: dict, as_json: bool, title: str) -> None:
    if not as_json:
        print(title)
        for k, v in res.items():
            print(f"  {k:32s} {v}")
    print(json.dumps(res))


def live_steps_per_s(start_broker: BrokerFactory, seconds: float = 10.0) -> dict:
    """Live collection in the same run as the dream figures: ``bench collect``'s 4-context run of
    expert episodes (real Chromium, the settle wait of ``collector.settle_ms``, every transition
    published to a private broker and acknowledged)."""
    from evaluation.bench.collect import run_bench

    r = run_bench(seconds=seconds, contexts=(4,), start_broker=start_broker)
    return {"steps_per_s": r["steps_per_s_4"], "contexts": 4, "seconds": seconds}


def main(
    args: Any,
    cfg: Config,
    start_broker: BrokerFactory | None = None,
    stack_factory: StackFactory | None = None,
) -> int:
    """``dynaweb bench dream|train`` (``args``: the CLI namespace; options read with defaults).
    ``start_broker``: dream measures live collection beside it (``dream_over_live``);
    ``stack_factory``: ``train --stream`` runs the trainer on the embedded stack."""
    starts = start_states(cfg, getattr(args, "starts", None))
    if not starts:
        raise ValueError("no start states")
    rounds = max(1, int(getattr(args, "rounds", None) or 1))
    if args.target == "dream":
        res = bench_dream(cfg, starts, int(getattr(args, "wm_tokens", None) or 48), rounds)
        if start_broker is not None:
            live = live_steps_per_s(start_broker)
            res["live_steps_per_s"] = live["steps_per_s"]
            res["dream_over_live"] = round(res["dream_steps_per_s_b16"] / live["steps_per_s"], 3)
            res["live"] = live
        _print(res, args.json, "dream throughput (from-config models, CPU)")
    elif args.target == "train" and getattr(args, "stream", False):
        from evaluation.bench.train_stream import main as stream_main

        if stack_factory is None:
            raise ValueError("bench train --stream needs the stack (S3 and the broker)")
        res = stream_main(args, cfg, stack_factory, starts)
        _print(res, args.json, "trainer fed by the topics vs in-memory batches (same run)")
    elif args.target == "train" and (getattr(args, "ranks", None) or 0) > 1:
        from evaluation.bench.train_ranks import bench_train_ranks

        res = bench_train_ranks(cfg, starts, int(args.ranks), steps=max(1, rounds * 3))
        _print(res, args.json, f"trainer: {args.ranks} data-parallel ranks against 1 (gloo, CPU)")
    elif args.target == "train":
        res = bench_train_tokenizers(cfg, starts, steps=max(1, rounds * 3))
        _print(res, args.json, "trainer throughput (DeepSpeed on CPU)")
    else:
        raise ValueError(f"evaluation.bench.train does not run {args.target!r}")
    return 0
