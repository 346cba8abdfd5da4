"""The one CLI: ``dynaweb <command>``.

Global options (before or after the command): ``--config FILE``, ``--run-id``,
``--home``, ``--threads``, ``--set section.field=value`` (repeatable).

The sub-commands and their options are in ``infra.subcommands`` (``FAMILIES``, one function
per command family, in the order ``dynaweb --help`` lists them); the implementations are in
``infra.commands``.
"""

from __future__ import annotations

import argparse
import logging
import sys

from core.config import Config, load_config
from infra.study_configs import study_config_class
from infra.subcommands import FAMILIES


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", default=argparse.SUPPRESS, help="YAML/JSON config file")
    p.add_argument(
        "--run-id", default=argparse.SUPPRESS, help="run id (namespaces topics and S3 prefixes)"
    )
    p.add_argument("--home", default=argparse.SUPPRESS, help="state directory (default ./.dynaweb)")
    p.add_argument(
        "--threads", type=int, default=argparse.SUPPRESS, help="torch threads (default 1)"
    )
    p.add_argument(
        "--set",
        action="append",
        default=argparse.SUPPRESS,
        metavar="KEY=VALUE",
        help="override any config field, e.g. --set stream.expert_fraction=0.3",
    )
    p.add_argument("--log-level", default=argparse.SUPPRESS, help="logging level (default INFO)")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="dynaweb", description=__doc__.splitlines()[0])
    _common(ap)
    sub = ap.add_subparsers(dest="command", required=True)

    def add(name: str, help: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help)
        _common(p)
        return p

    for register in FAMILIES:
        register(add)
    return ap


def resolve(args: argparse.Namespace) -> Config:
    """The command's config: a study's (``experiment STUDY``, ``config --study STUDY``) or the
    runtime one, from ``--config``, the environment, ``--set`` and the global options."""
    overrides: dict = {}
    for kv in getattr(args, "set", None) or []:
        if "=" not in kv:
            raise SystemExit(f"--set expects KEY=VALUE, got {kv!r}")
        k, v = kv.split("=", 1)
        overrides[k] = v
    for attr, key in (("run_id", "run_id"), ("home", "home"), ("threads", "threads")):
        if hasattr(args, attr):
            overrides[key] = getattr(args, attr)
    cls = study_config_class(getattr(args, "study", None))
    return load_config(getattr(args, "config", None), overrides, cls=cls)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=getattr(args, "log_level", "INFO").upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    for noisy in (
        "kafka",
        "aiokafka",
        "urllib3",
        "faust.transport",
    ):  # client chatter, not our events
        logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        cfg = resolve(args)
    except ValueError as e:  # an unknown key, a value of the wrong type, a contradiction
        print(f"dynaweb {args.command}: config error: {e}", file=sys.stderr)
        return 2
    from infra import commands

    try:
        return commands.dispatch(args, cfg) or 0
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # the reader went away (`dynaweb config --describe | head`)
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        return 0
    except commands.USER_ERRORS as e:
        print(f"dynaweb {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
