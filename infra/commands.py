"""Subcommand implementations (imports are lazy so `dynaweb --help` is fast); those of the
commands that measure (bench, eval, experiment, ablation, dream-fidelity) are in
``infra.measure_commands``.  ``dispatch`` runs the one ``COMMANDS`` names."""

from __future__ import annotations

import argparse
import json
import logging
import os
import socket
import sys
import threading
from pathlib import Path

from core.config import Config, describe
from core.s3 import S3Unavailable
from infra.measure_commands import (
    cmd_ablation,
    cmd_bench,
    cmd_dream_fidelity,
    cmd_eval,
    cmd_experiment,
)
from infra.stack import StackError
from infra.study_configs import STUDY_CONFIGS, study_config_class
from streams.kafka import ServiceUnavailable

USER_ERRORS = (StackError, ServiceUnavailable, S3Unavailable, ValueError, FileNotFoundError)


def default_id(component: str) -> str:
    return f"{component}-{socket.gethostname()}-{os.getpid()}"


def print_json(obj: object) -> None:
    print(json.dumps(obj, default=str))


def describe_rows(study: str | None = None) -> list[tuple[str, object, str]]:
    """The config reference: every field of the runtime ``Config``, then the section of each study
    (or of ``study`` only), as (key, default, help)."""
    rows = describe(Config)
    known = {key for key, _, _ in rows}
    for name in [study] if study else sorted(STUDY_CONFIGS):
        rows += [r for r in describe(study_config_class(name)) if r[0] not in known]
    return rows


def print_config(cfg: Config, describe_only: bool, study: str | None = None) -> None:
    if describe_only:
        for key, default, help in describe_rows(study):
            print(f"{key:38s} {json.dumps(default):>24s}  {help}")
    else:
        print(json.dumps(cfg.to_dict(), indent=2))


def cmd_infra(args: argparse.Namespace, cfg: Config) -> int:
    from infra.stack import Stack

    stack = Stack(cfg)
    only = stack.check_only(args.only)  # None: every service
    if args.action == "up":
        status = stack.up(only)
    elif args.action == "down":
        stopped = stack.down(only)
        status = {"stopped": stopped}
    else:
        status = stack.status()
    if args.json:
        print_json(status)
    else:
        for name, st in status.items():
            print(
                f"{name:11s} {st}"
                if not isinstance(st, dict)
                else f"{name:11s} {'healthy' if st['healthy'] else 'DOWN':8s} {st['endpoint']}"
                + (f"  credentials: {st['credentials_file']}" if "credentials_file" in st else "")
            )
    if args.action == "status" and not all(s["healthy"] for s in status.values()):
        return 1
    return 0


def cmd_collect(args: argparse.Namespace, cfg: Config) -> int:
    from collectors.run import main_collect

    if args.tasks:
        cfg.collector.tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    if args.policy:
        cfg.collector.policy = args.policy
    if args.contexts:
        cfg.collector.contexts = args.contexts
    if args.max_episodes is not None:
        cfg.collector.max_episodes = args.max_episodes
    return main_collect(cfg, args.collector_id or default_id("collector"))


def cmd_stream_worker(args: argparse.Namespace, cfg: Config) -> int:
    from streams.worker import run_worker

    return run_worker(cfg) or 0


def cmd_train(args: argparse.Namespace, cfg: Config) -> int:
    """One trainer rank, or (``--ranks N`` / ``trainer.ranks`` > 1 without a launcher's
    WORLD_SIZE) N local ranks started and watched as one group (``core.launch``)."""
    if args.max_steps is not None:
        cfg.trainer.max_steps = args.max_steps
    if getattr(args, "ranks", None) is not None:
        if args.ranks < 1:
            raise ValueError(f"--ranks must be 1 or more, got {args.ranks}")
        cfg.trainer.ranks = args.ranks
    launched = int(os.environ.get("WORLD_SIZE") or 1)  # a launcher's group (deepspeed, torchrun)
    if launched > 1 and cfg.trainer.ranks > 1 and launched != cfg.trainer.ranks:
        raise ValueError(
            f"trainer.ranks={cfg.trainer.ranks} under a launcher of WORLD_SIZE={launched}: "
            "the launcher decides the ranks"
        )
    if cfg.trainer.ranks > 1 and launched == 1:
        from core.launch import run_local_ranks

        argv = ["train"] + (["--linger", str(args.linger)] if getattr(args, "linger", 0) else [])
        if getattr(args, "log_level", None):
            argv += ["--log-level", args.log_level]
        return run_local_ranks(cfg, cfg.trainer.ranks, argv, name="trainer-ranks")
    from models.train.data_parallel import RankLost, env_world
    from models.train.run import run_trainer

    stop = threading.Event()
    try:
        run_trainer(cfg, stop)
    except RankLost as e:
        print(f"dynaweb train: error: {e}", file=sys.stderr, flush=True)
        return 1
    if getattr(args, "linger", 0) > 0 and not stop.is_set() and env_world()[0] == 0:
        stop.wait(args.linger)  # /metrics stays up until SIGTERM (sets ``stop``) or the time is up
    return 0


def cmd_dream(args: argparse.Namespace, cfg: Config) -> int:
    from models.dream.run import run_dreamer

    run_dreamer(cfg, default_id("dream"))
    return 0


def cmd_up(args: argparse.Namespace, cfg: Config) -> int:
    from infra.up import run_up

    return run_up(cfg, duration=args.duration, start_stack=not args.no_stack, as_json=args.json)


def cmd_chaos(args: argparse.Namespace, cfg: Config) -> int:
    from infra.chaos import default_faults, run
    from infra.soak import render

    faults = (
        [f.strip() for f in args.faults.split(",") if f.strip()]
        if args.faults
        else default_faults(cfg)
    )
    # the probe's client reports every refused connection of an injected broker outage
    logging.getLogger("kafka").setLevel(logging.CRITICAL)
    quiet = args.json

    def log(line: str) -> None:
        print(line, flush=True)

    def write(rep: dict) -> None:
        if args.report:
            Path(args.report).write_text(json.dumps(rep, indent=2) + "\n")

    rep = run(
        cfg,
        duration_s=args.duration,
        every_s=args.every,
        faults=list(faults),
        outage_s=args.outage,
        recovery_s=args.recovery,
        warmup_s=args.warmup,
        log=log,
        on_report=write,
        max_checkpoint_gap_s=args.max_checkpoint_gap,
        read_timeout_s=args.read_timeout,
    )
    write(rep)
    if not quiet:
        print(render(rep))
    print(json.dumps(rep) if quiet else f"ok: {rep['ok']}")
    return 0 if rep["ok"] else 1


def cmd_tasks(args: argparse.Namespace, cfg: Config) -> int:
    from collectors.tasks import list_tasks

    tasks = list_tasks()
    if args.json:
        print(
            json.dumps(
                {
                    "tasks": [t.name for t in tasks],
                    "experts": [t.name for t in tasks if t.has_expert],
                    "unsolvable": [t.name for t in tasks if not t.solvable],
                    "unsolvable_reasons": {t.name: t.note for t in tasks if not t.solvable},
                }
            )
        )
    else:
        for t in tasks:
            flags = ("expert " if t.has_expert else "       ") + (
                "" if t.solvable else "unsolvable: " + t.note
            )
            print(f"{t.name:40s} {flags}")
    return 0


def cmd_experts(args: argparse.Namespace, cfg: Config) -> int:
    from evaluation.expert_table import main

    return main(args, cfg)


def cmd_check_behaviour(args: argparse.Namespace, cfg: Config) -> int:
    from evaluation.behaviour import main

    return main(args, cfg)


def cmd_checkpoint(args: argparse.Namespace, cfg: Config) -> int:
    from core.s3 import make_client
    from models.checkpoints.store import CheckpointStore

    store = CheckpointStore(make_client(cfg), cfg.s3.bucket, cfg.run_id)
    if args.action == "list":
        lat = store.latest(args.kind)
        versions = store.versions(args.kind)
        decisions = store.decisions(args.kind)
        latest = lat["version"] if lat else None
        gate = {v: _gate_status(decisions.get(v), v, latest, cfg.gate.enabled) for v in versions}
        out = {
            "kind": args.kind,
            "versions": versions,
            "promoted": store.promoted(args.kind),
            "latest": latest,
            "gate": {v: g for v, g in gate.items() if g},
            "decisions": {
                v: {
                    k: decisions[v].get(k) for k in ("decision", "by", "reason", "baseline_version")
                }
                for v in versions
                if v in decisions
            },
        }
        if args.json:
            print_json(out)
        else:
            for v in versions:
                marks = " ".join(
                    m
                    for m in (
                        "LATEST" if v == latest else "",
                        "promoted" if v in out["promoted"] else "",
                        gate[v],
                    )
                    if m
                )
                reason = (
                    decisions.get(v, {}).get("reason", "") if gate[v] == "gate:rejected" else ""
                )
                print(f"{args.kind} {v:6d} {marks}" + (f"  ({reason})" if reason else ""))
        return 0
    if args.version is None:
        raise ValueError(f"checkpoint {args.action} needs a VERSION")
    if args.version not in store.versions(args.kind):
        raise ValueError(
            f"{args.kind} version {args.version} does not exist; see `dynaweb checkpoint list`"
        )
    if args.action == "promote":
        store.promote(args.kind, args.version)
    else:
        store.set_latest(args.kind, args.version)
    _announce_latest(cfg, store, args.kind, args.version)
    print(f"{args.kind} LATEST -> {args.version}")
    return 0


def _gate_status(decision: dict | None, version: int, latest: int | None, gated: bool) -> str:
    """``gate:promoted|rejected|superseded`` from the gate's record; with gating on, ``gate:candidate``
    for an undecided version newer than LATEST; '' otherwise."""
    if decision:
        return f"gate:{decision.get('decision', '?')}"
    return "gate:candidate" if gated and latest is not None and version > latest else ""


def _announce_latest(cfg: Config, store, kind: str, version: int) -> None:
    from models.checkpoints.store import announce
    from streams.kafka import ensure_topics

    announce(cfg.run_id, cfg.kafka, ensure_topics(cfg), store, kind, version)


def cmd_gate(args: argparse.Namespace, cfg: Config) -> int:
    from evaluation.gate import run_gate

    done = run_gate(cfg, args.gate_id or default_id("gate"), once=args.once)
    if args.once:
        res = done[-1] if done else {"version": None, "decision": None, "reason": "no candidate"}
        if args.json:
            print_json(res)
        else:
            print(
                f"v{res['version']} {res['decision']}: {res['reason']}"
                if done
                else "no candidate to decide"
            )
    return 0


def cmd_config(args: argparse.Namespace, cfg: Config) -> int:
    print_config(cfg, args.describe, getattr(args, "study", None))
    return 0


def cmd_status(args: argparse.Namespace, cfg: Config) -> int:
    import sys

    from core.prom import PrometheusUnavailable
    from infra.status import status

    run = cfg.run_id if (getattr(args, "run_id", None) or cfg.run_id != "default") else None
    try:
        return status(cfg, args.prometheus, run, as_json=args.json)
    except PrometheusUnavailable as e:
        print(f"dynaweb status: error: {e}", file=sys.stderr)
        return 2


def cmd_report(args: argparse.Namespace, cfg: Config) -> int:
    import sys

    from core.prom import Prom, PrometheusUnavailable, prometheus_url
    from infra.report import write_report

    try:
        res = write_report(
            Prom(prometheus_url(cfg.stack, args.prometheus)),
            args.report_run or cfg.run_id,
            args.out,
        )
    except PrometheusUnavailable as e:
        print(f"dynaweb report: error: {e}", file=sys.stderr)
        return 2
    for f in res["files"]:
        print(f)
    return 0


def cmd_tokenizer(args: argparse.Namespace, cfg: Config) -> int:
    from pathlib import Path

    from models import tokenizer_train as tt

    corpus = Path(args.corpus) if args.corpus else tt.CORPUS
    if args.action == "corpus":
        if not args.out:
            raise ValueError("tokenizer corpus needs --out FILE (.jsonl.gz)")
        from collectors.corpus import collect_corpus

        res = collect_corpus(
            cfg,
            Path(args.out),
            args.expert_episodes,
            args.random_episodes,
            log=(lambda *_: None) if args.json else print,
        )
    elif args.action == "train":
        if not args.out:
            raise ValueError("tokenizer train needs --out DIR")
        res = tt.train(Path(args.out), corpus, args.vocab_size or tt.VOCAB_SIZE)
    else:
        sizes = tuple(int(x) for x in str(args.vocab_sizes).split(",") if x.strip())
        res = tt.stats(corpus, sizes, layers=cfg.model.layers, d_model=cfg.model.d_model)
        if not args.json:
            print(
                f"tokens per held-out transition ({res['heldout_transitions']} transitions; MMACs: forward "
                f"multiply-adds per transition of a {res['model']} model)"
            )
            rows = [("byte", res["byte"]), ("bpe (shipped)", res["bpe"])]
            rows += [(f"bpe {v}", s) for v, s in res["sweep"].items()]
            print(
                f"  {'tokenizer':14s} {'vocab':>6s} {'policy':>8s} {'world model':>12s} {'total':>8s} {'x fewer':>8s}"
                f" {'MMACs':>8s}"
            )
            for name, s in rows:
                print(
                    f"  {name:14s} {s['vocab']:6d} {s['policy']:8.1f} {s['world_model']:12.1f} {s['total']:8.1f} "
                    f"{s.get('ratio_byte_over_bpe', 1.0):8.2f} {s['mmacs']:8.1f}"
                )
    print(json.dumps(res))
    return 0


def cmd_demos(args: argparse.Namespace, cfg: Config) -> int:
    from collectors.demos import main

    return main(args, cfg)


COMMANDS = {
    "infra": cmd_infra,
    "collect": cmd_collect,
    "stream-worker": cmd_stream_worker,
    "train": cmd_train,
    "dream": cmd_dream,
    "up": cmd_up,
    "chaos": cmd_chaos,
    "tasks": cmd_tasks,
    "experts": cmd_experts,
    "check-behaviour": cmd_check_behaviour,
    "checkpoint": cmd_checkpoint,
    "config": cmd_config,
    "status": cmd_status,
    "report": cmd_report,
    "bench": cmd_bench,
    "demos": cmd_demos,
    "eval": cmd_eval,
    "experiment": cmd_experiment,
    "ablation": cmd_ablation,
    "dream-fidelity": cmd_dream_fidelity,
    "gate": cmd_gate,
    "tokenizer": cmd_tokenizer,
}


def dispatch(args: argparse.Namespace, cfg: Config) -> int:
    return COMMANDS[args.command](args, cfg)
