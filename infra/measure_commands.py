"""The implementations of the commands that measure, ``evaluation/``'s: ``bench``, ``eval``,
``experiment``, ``ablation`` and ``dream-fidelity`` (imports are lazy so `dynaweb --help` is
fast).  A bench or a study that needs a broker or the embedded stack of its own is handed the
operations that start them (``infra.stack``) here."""

from __future__ import annotations

import argparse
import importlib
import json

from core.config import Config


def cmd_bench(args: argparse.Namespace, cfg: Config) -> int:

    if args.target == "reload":
        from evaluation.bench.reload import main as reload_main
        from infra.stack import Stack

        return reload_main(args, cfg, stack_factory=Stack)
    if args.target == "wm-decode":
        from evaluation.bench.wm_decode import main as wm_decode_main

        return wm_decode_main(args, cfg)
    if args.target == "act":
        from evaluation.bench.act import main as act_main

        return act_main(args, cfg)
    if args.target in ("collect", "dream", "train"):
        module = {
            "collect": "evaluation.bench.collect",
            "dream": "evaluation.bench.train",
            "train": "evaluation.bench.train",
        }[args.target]
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as e:
            if e.name != module:
                raise
            raise ValueError(
                f"`bench {args.target}` is not available yet ({module} does not exist)"
            ) from None
        from infra.stack import PrivateBroker

        # a bench with a broker of its own is given the operations that start it
        extra: dict = {"start_broker": PrivateBroker} if args.target in ("collect", "dream") else {}
        if args.target == "train" and getattr(args, "stream", False):
            from infra.stack import Stack

            extra = {"stack_factory": Stack}
        return mod.main(args, cfg, **extra) or 0
    from evaluation.bench.streams import main
    from infra.stack import PrivateBroker, Stack

    return main(args, cfg, start_broker=PrivateBroker, stack_factory=Stack)


def cmd_eval(args: argparse.Namespace, cfg: Config) -> int:
    if args.target == "world-model":
        from evaluation.eval.world_model import main
    elif args.target == "replay":
        from evaluation.eval.replay import main
    else:
        from evaluation.eval.policy import main

    return main(args, cfg) or 0


def cmd_experiment(args: argparse.Namespace, cfg: Config) -> int:
    if getattr(args, "study", None) == "world-model":
        from evaluation.studies.world_model.study import main as wm_main

        return wm_main(args, cfg) or 0
    from evaluation.studies.sample_efficiency.study import main
    from infra.stack import Stack

    return main(args, cfg, stack_factory=Stack)


def cmd_ablation(args: argparse.Namespace, cfg: Config) -> int:
    from evaluation.studies.sample_efficiency.ablation import main

    res = main(args.on, args.off, out=args.md, as_json=args.json)
    if args.json:
        print(json.dumps(res))
    return 0


def cmd_dream_fidelity(args: argparse.Namespace, cfg: Config) -> int:
    from evaluation.studies.sample_efficiency.fidelity import main

    res = main(args.out, md=args.md, as_json=args.json)
    if args.json:
        print(json.dumps(res))
    return 0
