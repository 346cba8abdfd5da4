"""``dynaweb bench reload``: how long a new policy checkpoint takes to be used.

On the embedded stack (S3 on loopback; started if it is not running) a dream generator and a
``latest``-policy live collector run as supervised components (``core.supervise``, as in
``dynaweb up``); the bench plays the trainer.  It writes version 0 of both models (the default
model, fresh; with the trainer's optimizer state beside the weights, as the trainer uploads), waits until both readers act with it, then for ``--checkpoints`` N new versions,
one every ``--interval`` seconds: uploads the policy and world model to S3, sets ``LATEST`` and
announces both (``models.checkpoints.writer``, as the trainer does), and times from the
announcement's acknowledgement to

- the first **dream group** started with the version: the earliest step-0 transition on the
  dream topic with that ``policy_version``, at its ``created_at`` (when the generator dreamed
  that step: the policy acted with the version and the world model answered), and
- the first **live episode** started with it: the first step-0 transition on the real topic with
  that ``policy_version``, at its Kafka timestamp (a collector sends each step as it is taken).

Both are the same moment: the version's first step exists.  A dream round's records are sent
together when the round ends, so the dream group's publication is reported too
(``dream_published_p50_s``, ``dream_published_p95_s``: the version's first dream record's Kafka
timestamp); it includes the rest of that round.

The dream generator runs unpaced (``dream.pace`` off, ``dream_paced`` in the report): the bench
plays the trainer's checkpoints, not its consumption reports, and a paced generator would wait
for those until its write-off (60 s).

It reports p50 and p95 of each and of both starts together (``reload_p50_s``,
``reload_p95_s``), the readers' own ``dynaweb_client_checkpoint_reload_to_use_seconds``
(announcement seen -> first step with the version, scraped at the end), whether any group mixed
policy versions further apart than ``stream.max_staleness`` (a group must not), and each
reader's memory growth per reload (``rss_mb_per_reload``: its own process's resident set after
version 0 and after the last).
"""

from __future__ import annotations

import json
import re
import tempfile
import threading
import time
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

from kafka import TopicPartition

from core.config import Config
from core.metrics import scrape_targets
from core.s3 import make_client
from core.supervise import Supervisor
from evaluation.operations import StackFactory
from models.checkpoints.store import KINDS, CheckpointStore
from models.checkpoints.writer import CheckpointWriter
from models.lm.saved import make_model
from streams import records
from streams.kafka import ensure_topics, make_consumer, make_publisher

READY_TIMEOUT_S = 600.0  # both readers acting with version 0 (model loads, a browser, a round)
USE_TIMEOUT_S = 120.0  # per version


def quantile(xs: list[float], q: float) -> float | None:
    """The ``q`` quantile by linear interpolation (None when empty)."""
    if not xs:
        return None
    s = sorted(xs)
    k = (len(s) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


class FirstUse:
    """Tails the dream and real topics in a thread: per policy version, when its first dream
    group started (the earliest ``created_at`` of its step-0 records: when that step was
    dreamed), when its first dream record was sent, when its first live step-0 record was sent,
    and the versions seen per group."""

    def __init__(self, cfg: Config, topics: Any):
        self.cfg = cfg
        self.topics = topics
        self.first: dict[str, dict[int, float]] = {"dream": {}, "dream_published": {}, "live": {}}
        self.group_versions: dict[str, set[int]] = defaultdict(set)
        self.group_source: dict[str, str] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="bench-reload-tail", daemon=True)

    def _run(self) -> None:
        consumer = make_consumer(self.cfg.kafka)
        tps = []
        for t in (self.topics.dream, self.topics.real):
            parts = consumer.partitions_for_topic(t) or {0}
            tps += [TopicPartition(t, p) for p in sorted(parts)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        try:
            while not self.stop.is_set():
                for tp, msgs in consumer.poll(timeout_ms=200).items():
                    for m in msgs:
                        self._note(tp.topic, m)
        finally:
            consumer.close()

    def _note(self, topic: str, m: Any) -> None:
        try:
            t = records.decode(m.value, expect="transition")
        except records.RecordError:
            return  # sentinels, controls
        v = int(t.policy_version)
        if t.group_id:
            self.group_versions[t.group_id].add(v)
            self.group_source[t.group_id] = "dream" if topic == self.topics.dream else "live"
        sent = m.timestamp / 1000.0
        if topic == self.topics.dream:
            self.first["dream_published"].setdefault(v, sent)
        if t.step != 0:
            return
        if topic == self.topics.dream:  # when the step was dreamed, not when its round was sent
            at = min(float(t.created_at or sent), sent)
            self.first["dream"][v] = min(self.first["dream"].get(v, at), at)
        else:  # a collector sends each step as it is taken
            self.first["live"].setdefault(v, sent)

    def used(self, kind: str, version: int) -> float | None:
        return self.first[kind].get(version)

    def mixed_groups(self, max_staleness: int) -> int:
        return len(self.mixed_detail(max_staleness, limit=None))

    def mixed_detail(self, max_staleness: int, limit: int | None = 5) -> list[dict]:
        """The groups whose records' policy versions lie more than ``max_staleness`` apart: their
        id, source (dream or live) and versions (the first ``limit``)."""
        out = [
            {"group": g, "source": self.group_source.get(g), "versions": sorted(vs)}
            for g, vs in self.group_versions.items()
            if max(vs) - min(vs) > max_staleness
        ]
        return out if limit is None else out[:limit]


# a reader's own line for each version it loaded (models.checkpoints.reader.ModelSlot._prepare)
_LOADED = re.compile(
    r"loaded (?P<kind>\w+) v(?P<v>\d+) in (?P<total>[\d.]+)s \(download (?P<download>[\d.]+)s, "
    r"held (?P<held>[\d.]+)s, load lock (?P<lock>[\d.]+)s, free (?P<free>[\d.]+)s, "
    r"load (?P<load>[\d.]+)s\)"
)
PHASES = ("download", "held", "lock", "free", "load", "total")


def load_phases(log_text: str, first_version: int = 1) -> dict[str, dict[str, float | None]]:
    """Where a reader's reload seconds went, per model kind: the median of each phase of its
    loads of versions >= ``first_version`` (download with its manifest and hash check, held behind
    a dream round, waiting for the load lock, freeing the replaced model, building the model)."""
    rows: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for m in _LOADED.finditer(log_text):
        if int(m["v"]) >= first_version:
            for ph in PHASES:
                rows[m["kind"]][ph].append(float(m[ph]))
    return {k: {ph: quantile(v[ph], 0.5) for ph in PHASES} for k, v in rows.items()}


def _reader_phases(sup: Supervisor) -> dict[str, dict]:
    out = {}
    for c in sup.children:
        try:
            out[c.name] = load_phases(c.log.read_text(errors="replace"))
        except OSError:
            continue
    return out


def _save_models(cfg: Config, work: Path) -> dict[str, Path]:
    from models.policy.model import Policy
    from models.world_model.model import WorldModel

    dirs = {}
    for kind, cls in (("policy", Policy), ("world_model", WorldModel)):
        model, tok = make_model(cls, cfg.model)
        d = work / kind
        (d / "hf").mkdir(parents=True)
        model.save_pretrained(str(d / "hf"))
        tok.save_pretrained(str(d / "hf"))
        _trainer_state(model, d / "state" / "ds")
        dirs[kind] = d
    return dirs


def _trainer_state(model: Any, d: Path) -> None:
    """What the trainer uploads beside ``hf/``: DeepSpeed's ``mp_rank_00_model_states.pt`` (the
    module and Adam's two moments, three times the weights), so the bench's checkpoints are as
    large as the trainer's and a reader that fetched them would pay for it here too."""
    import torch

    d.mkdir(parents=True)
    sd = {k: v.detach().clone() for k, v in model.state_dict().items()}
    moments = {k: (torch.zeros_like(v), torch.zeros_like(v)) for k, v in sd.items()}
    torch.save({"module": sd, "optimizer": moments}, d / "mp_rank_00_model_states.pt")
    (d.parent / "latest").write_text("ds")


def _publish(writer: CheckpointWriter, cfg: Config, dirs: dict[str, Path], version: int) -> float:
    """Both models as ``version``, LATEST, then both announced (as the trainer does); the time
    the announcements were acknowledged."""
    saved = [
        writer.upload(kind, version, dirs[kind], cfg.to_dict(), {}, {}, set_latest=True)
        for kind in KINDS
    ]
    for s in saved:
        writer.announce(s)
    writer.flush()
    return time.time()


def _wait(cond, timeout: float, what: str, sup: Supervisor) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        sup.supervise()
        if cond():
            return
        time.sleep(0.2)
    raise TimeoutError(f"{what} not within {timeout:.0f}s (logs: {sup.logs})")


def _readers(cfg: Config) -> dict[str, list[str]]:
    task = cfg.collector.tasks[0] if cfg.collector.tasks else "miniwob/click-button"
    return {
        "dream-0": ["dream"],
        "collector-latest-0": ["collect", "--policy", "latest", "--contexts", "1", "--tasks",
                               task, "--id", f"collector-latest-0-{cfg.run_id}"],
    }  # fmt: skip


def _own_metric(cfg: Config) -> dict[str, dict]:
    """The readers' own reload-to-use histograms (sum and count by component)."""
    out: dict[str, dict] = {}
    for labels, text in scrape_targets(cfg):
        for line in text.splitlines():
            if line.startswith("dynaweb_client_checkpoint_reload_to_use_seconds_"):
                name, value = line.rsplit(" ", 1)
                field = name.split("{")[0].rsplit("_", 1)[1]
                if field in ("sum", "count"):
                    c = out.setdefault(labels.get("component", "?"), {"sum": 0.0, "count": 0.0})
                    c[field] += float(value)
    return {
        c: {"mean_s": round(v["sum"] / v["count"], 3) if v["count"] else None,
            "count": int(v["count"])}
        for c, v in out.items()
    }  # fmt: skip


def _rss_mb(sup: Supervisor) -> dict[str, tuple[int, float]]:
    """(pid, resident set in MB) of each reader's own process (not its browser)."""
    import psutil

    out = {}
    for c in sup.children:
        try:
            out[c.name] = (c.proc.pid, psutil.Process(c.proc.pid).memory_info().rss / 2**20)
        except (psutil.Error, AttributeError):
            pass
    return out


def bench_reload(cfg: Config, n: int, interval_s: float, say=print) -> dict:
    topics = ensure_topics(cfg)
    work = Path(tempfile.mkdtemp(prefix="dynaweb-bench-reload-"))
    dirs = _save_models(cfg, work)
    store = CheckpointStore(make_client(cfg), cfg.s3.bucket, cfg.run_id)
    pub = make_publisher(cfg.kafka, client="bench-reload", run=cfg.run_id)
    writer = CheckpointWriter(store, pub, topics.checkpoints, cfg.run_id, threading.Event())
    tail = FirstUse(cfg, topics)
    tail.thread.start()
    sup = Supervisor(cfg, _readers(cfg))
    try:
        _publish(writer, cfg, dirs, 0)
        for c in sup.children:
            sup.start(c)
        t0 = time.time()
        _wait(lambda: tail.used("dream", 0) and tail.used("live", 0), READY_TIMEOUT_S,
              "a dream group and a live episode with version 0", sup)  # fmt: skip
        say(f"both readers act with version 0 after {time.time() - t0:.0f}s")
        rss0 = _rss_mb(sup)
        lat: dict[str, list[float]] = {"dream": [], "live": [], "dream_published": []}
        for v in range(1, n + 1):
            began = time.time()
            at = _publish(writer, cfg, dirs, v)
            _wait(lambda v=v: tail.used("dream", v) and tail.used("live", v), USE_TIMEOUT_S,
                  f"version {v} in use", sup)  # fmt: skip
            for kind in lat:  # a dream group's first record (published) comes with its start
                lat[kind].append(max(0.0, tail.used(kind, v) - at))
            say(f"v{v}: dream group started {lat['dream'][-1]:.2f}s (published "
                f"{lat['dream_published'][-1]:.2f}s), live episode {lat['live'][-1]:.2f}s after "
                "the announcement")  # fmt: skip
            time.sleep(max(0.0, interval_s - (time.time() - began)))
        own = _own_metric(cfg)
        rss1 = _rss_mb(sup)
        phases = _reader_phases(sup)
    finally:
        tail.stop.set()
        sup.stop()
        pub.close()
    both = lat["dream"] + lat["live"]
    r3 = lambda x: None if x is None else round(x, 3)  # noqa: E731
    return {
        "checkpoints": n,
        "reload_p50_s": r3(quantile(both, 0.5)),
        "reload_p95_s": r3(quantile(both, 0.95)),
        **{f"{k}_p{q}_s": r3(quantile(lat[k], q / 100)) for k in lat for q in (50, 95)},
        "dream_s": [round(x, 3) for x in lat["dream"]],
        "dream_published_s": [round(x, 3) for x in lat["dream_published"]],
        "live_s": [round(x, 3) for x in lat["live"]],
        "readers_own_metric": own,
        # announcement seen -> model ready, per reader and kind: medians of the phases of its loads
        "load_phases_p50_s": phases,
        "groups": len(tail.group_versions),
        "groups_mixing_beyond_max_staleness": tail.mixed_groups(cfg.stream.max_staleness),
        "groups_mixing_detail": tail.mixed_detail(cfg.stream.max_staleness),
        "max_staleness": cfg.stream.max_staleness,
        "dream_paced": cfg.dream.pace,
        # fresh weights never write eos: every world-model call writes this many tokens (a trained
        # world model writes its change and stops: 31 tokens on average on the committed corpus)
        "wm_tokens_per_call": cfg.dream.max_change_tokens,
        # the readers' memory per reload (their own process; a restarted one is left out)
        "rss_mb_per_reload": {
            k: round((rss1[k][1] - rss0[k][1]) / n, 2)
            for k in rss0
            if k in rss1 and rss1[k][0] == rss0[k][0] and n
        },
    }


def main(args: Any, cfg: Config, stack_factory: StackFactory) -> int:
    n = int(getattr(args, "checkpoints", 8))
    if not getattr(args, "run_id", None):  # a run of its own, never the user's default run
        cfg.run_id = f"bench-reload-{uuid.uuid4().hex[:8]}"
    # the bench plays the trainer's checkpoints, not its consumption: a paced dream generator
    # (dream.pace) would wait for consumption reports that never come, and a version announced
    # while its window is full would be timed by the pacing's write-off (60 s), not by the reload
    cfg.dream.pace = False
    stack = stack_factory(cfg)
    say = (lambda _m: None) if args.json else print
    try:
        stack.up(only=["s3", "broker", "taskserver"])
        res = bench_reload(cfg, n, float(getattr(args, "interval", 10.0)), say=say)
    finally:
        if stack.started:
            stack.down(only=stack.started)
    if not args.json:
        print(
            f"announcement -> first use over {n} checkpoints: dream group started p50 "
            f"{res['dream_p50_s']} s p95 {res['dream_p95_s']} s (published p50 "
            f"{res['dream_published_p50_s']} s p95 {res['dream_published_p95_s']} s); live "
            f"episode started p50 {res['live_p50_s']} s p95 {res['live_p95_s']} s; both p95 "
            f"{res['reload_p95_s']} s; groups mixing versions beyond max_staleness: "
            f"{res['groups_mixing_beyond_max_staleness']} of {res['groups']}"
        )
    print(json.dumps(res))
    return 0 if res["groups_mixing_beyond_max_staleness"] == 0 else 1
