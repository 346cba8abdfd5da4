"""Run the stream worker in this process: ``python -m streams.worker`` or
``dynaweb stream-worker`` (which calls ``run_worker(cfg)``).

Configuration comes from ``core.config.load_config()`` (env form, e.g.
``DYNAWEB_KAFKA__BOOTSTRAP=127.0.0.1:9092 DYNAWEB_RUN_ID=x``).

Start-up: create the run's topics (idempotent), start the side reader (expert
pool, latest policy version, control: read in full up to a sentinel, then
tailed; streams.side), start the Prometheus endpoint
on 127.0.0.1 (``cfg.metrics_port``, 0 = a free port, written to
``<datadir>/metrics_port``), then run the Faust worker until SIGTERM/SIGINT.
A ``<datadir>/ready`` file is written once partitions are assigned (and the
episodes already emitted loaded, streams.recovery) and the side topics caught
up; ``<datadir>/rebuild.json`` says what the side catch-up found.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys

import faust

from core.config import Config, load_config
from streams import kafka as sk
from streams.agents import Runner, register
from streams.app import datadir, make_app, worker_id
from streams.side import SideReader
from streams.state import StreamState

log = logging.getLogger("dynaweb.stream_worker")


def start_metrics(cfg: Config) -> int:
    """Serve metrics on 127.0.0.1 and register them for Prometheus file discovery."""
    from core.metrics import MetricsEndpoint

    ep = MetricsEndpoint(cfg, "stream-worker", worker_id(cfg.stream))
    (datadir(cfg.home_path, cfg.run_id, cfg.stream) / "metrics_port").write_text(str(ep.port))
    return ep.port


def check_codecs() -> None:
    """Our producers compress with lz4 (streams.kafka.make_producer); aiokafka can
    only decode it with ``cramjam``: fail at start, not on the first batch."""
    from aiokafka.codec import has_lz4, has_zstd

    if not (has_lz4() and has_zstd()):
        raise RuntimeError(
            "aiokafka cannot decode lz4/zstd batches: `pip install cramjam` (aiokafka[lz4,zstd])"
        )


def build(cfg: Config, side: bool = True) -> tuple[faust.App, StreamState, Runner]:
    check_codecs()
    if not cfg.stream.worker_id:
        cfg.stream.worker_id = worker_id(
            cfg.stream
        )  # pin it: the same id everywhere in this process
    topics = sk.ensure_topics(cfg)
    state = StreamState(cfg, topics)
    reader = None
    if side:
        reader = SideReader(
            cfg.kafka, [topics.expert, topics.checkpoints, topics.control], cfg.run_id
        )
    state.sync_metrics()
    app = make_app(cfg)
    wdir = datadir(cfg.home_path, cfg.run_id, cfg.stream)
    ready = wdir / "ready"
    ready.unlink(missing_ok=True)
    runner = register(app, cfg, topics, state=state, side=reader, ready_file=ready)

    def caught_up() -> None:
        info = state.side_snapshot()
        (wdir / "rebuild.json").write_text(json.dumps(info))
        log.info("side topics caught up: %s", info)

    runner.on_caught_up = caught_up
    if reader is not None:
        reader.start()
    return app, state, runner


def run_worker(cfg: Config | None = None, loglevel: str = "info") -> None:
    cfg = cfg or load_config()
    logging.basicConfig(
        level=loglevel.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    app, state, _runner = build(cfg)
    port = start_metrics(cfg)
    log.info(
        "stream worker %s for run %s: metrics on 127.0.0.1:%d", state.worker_id, cfg.run_id, port
    )
    worker = faust.Worker(app, loglevel=loglevel, quiet=True, redirect_stdouts=False)
    # no terminal spinner: at a level of WARNING or above its handler sets the root logger to
    # DEBUG, and every library's debug call (aiokafka: one per message sent) built a log record
    worker.spinner = None
    worker.execute_from_commandline()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="dynaweb stream-worker", description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", help="YAML/JSON config file (else DYNAWEB_CONFIG / env).")
    ap.add_argument("--loglevel", default="info")
    args = ap.parse_args(argv)
    try:
        run_worker(load_config(args.config), loglevel=args.loglevel)
    except sk.ServiceUnavailable as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
