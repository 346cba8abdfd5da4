"""Checkpoint gating: a candidate becomes ``LATEST`` only if its probes hold up.

With ``gate.enabled`` the trainer writes every version after the first as a
*candidate* (files and manifest in S3, ``LATEST`` untouched, nothing announced;
``models.train.trainer``).  ``dynaweb gate`` (``run_gate``) watches S3 for the newest
version that both model kinds have and that is newer than ``LATEST`` and every
decided version, then runs the configured probes on the candidate and on the
current ``LATEST``:

``world_model``
    fidelity (``gate.wm_metric``, default change F1) on the newest
    ``gate.wm_transitions`` held-out real transitions of the run's
    ``eval.world_model`` topic (``evaluation.eval.world_model.world_model_fidelity``); the
    candidate and ``LATEST`` are scored on the same transitions.
``policy``
    a short live evaluation: greedy success rate on ``gate.tasks`` x
    ``gate.seeds`` in Chromium (``evaluation.eval.policy.run_live_policy``), seeds
    outside the training range.

``decide`` promotes unless a probe's candidate score is below the baseline's
minus that probe's margin (the first version, with no ``LATEST``, always
passes; a probe without data on either side is skipped; a candidate that cannot
be scored where the baseline can is rejected).  A promotion moves ``LATEST`` of
both kinds and announces them on the checkpoints topic, so dream generators and
``latest`` collectors follow; a rejection leaves ``LATEST`` where it is.  Either
way the decision (reason and figures) is written to
``<run>/checkpoints/<kind>/<version>/gate.json`` (``dynaweb checkpoint list``
shows it) and counted in ``dynaweb_gate_decisions_total{decision}``.  Older
undecided candidates are marked ``superseded``.  ``dynaweb checkpoint promote``
stays the manual override.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import Counter, Gauge, Histogram

from core.config import Config
from models.checkpoints.store import KINDS, CheckpointStore, CorruptCheckpoint, announce

log = logging.getLogger(__name__)

GATE_DECISIONS = Counter(
    "dynaweb_gate_decisions_total", "Gate decisions on candidate checkpoints.", ["run", "decision"]
)
GATE_SCORE = Gauge(
    "dynaweb_gate_probe_score",
    "Last probe score of the candidate and of LATEST (the baseline).",
    ["run", "probe", "role"],
)
GATE_LATEST = Gauge(
    "dynaweb_gate_latest_version", "Policy LATEST after the gate's last decision.", ["run"]
)
GATE_CANDIDATE = Gauge(
    "dynaweb_gate_candidate_version", "Version of the last candidate decided.", ["run"]
)
GATE_SECONDS = Histogram(
    "dynaweb_gate_decision_seconds",
    "Time to probe and decide one candidate.",
    ["run"],
    buckets=(1, 2, 5, 10, 30, 60, 120, 300, 600),
)
GATE_ERRORS = Counter(
    "dynaweb_gate_errors_total",
    "Decisions that failed (S3 or broker errors) and are retried.",
    ["run"],
)
DECISIONS = ("promoted", "rejected", "superseded")
WM_METRICS = ("exact_match", "change_f1", "reward_bal_acc", "done_bal_acc", "ok_rate")


# --- the decision (pure) ------------------------------------------------------------


@dataclass
class Decision:
    promote: bool
    reason: str
    figures: dict = field(default_factory=dict)

    @property
    def decision(self) -> str:
        return "promoted" if self.promote else "rejected"


def decide(
    candidate: dict[str, float | None],
    baseline: dict[str, float | None] | None,
    margins: dict[str, float],
) -> Decision:
    """Promote unless a probe's candidate score < baseline score - margin (higher is better).

    ``baseline`` None: there is no LATEST yet, the candidate is promoted.  Per probe
    in ``margins``: no score on either side = skipped; only the baseline scored =
    rejected (the candidate could not be probed); only the candidate scored = passes.
    """
    figures = {
        p: {"candidate": candidate.get(p), "baseline": (baseline or {}).get(p), "margin": m}
        for p, m in margins.items()
    }
    if baseline is None:
        return Decision(True, "first version (no LATEST to compare with)", figures)
    failed, notes = [], []
    for probe, margin in margins.items():
        c, b = candidate.get(probe), baseline.get(probe)
        if c is None and b is None:
            notes.append(f"{probe}: skipped (no score)")
        elif c is None:
            failed.append(f"{probe}: the candidate has no score (baseline {b:.3f})")
        elif b is None:
            notes.append(f"{probe}: no baseline score, candidate {c:.3f}")
        elif c < b - margin:
            failed.append(f"{probe}: candidate {c:.3f} < baseline {b:.3f} - margin {margin:g}")
        else:
            notes.append(f"{probe}: candidate {c:.3f} >= baseline {b:.3f} - margin {margin:g}")
    if failed:
        return Decision(False, "; ".join(failed + notes), figures)
    return Decision(True, "; ".join(notes) or "no probes configured", figures)


# --- probes ---------------------------------------------------------------------------


def probe_seeds(cfg: Config) -> list[int]:
    from evaluation.eval.policy import check_eval_seeds, parse_seed_range

    g = cfg.gate
    base = cfg.collector.seed_stop + 100_000
    seeds = parse_seed_range(g.seeds) if g.seeds else list(range(base, base + 4))
    check_eval_seeds(seeds, cfg)
    return seeds


def probe_tasks(cfg: Config) -> list[str]:
    tasks = list(cfg.gate.tasks or cfg.collector.tasks)
    return [t if "/" in t else f"miniwob/{t}" for t in tasks]


class Probes:
    """Scores of one version per probe (``None`` = no score); the live policy score is cached
    per version (greedy on fixed seeds), the world-model one per version and data."""

    def __init__(self, cfg: Config):
        self.cfg = cfg
        self._cache: dict[tuple, dict] = {}

    def heldout(self) -> list:
        from evaluation.eval.sources import read_topic
        from streams.topics import Topics

        topic = Topics(self.cfg.run_id, self.cfg.kafka.partitions).world_model_eval
        seen, uniq = set(), []
        for t in read_topic(self.cfg, topic, self.cfg.gate.timeout_s):
            if t.source != "dream" and t.run_id == self.cfg.run_id and t.key not in seen:
                seen.add(t.key)
                uniq.append(t)
        n = self.cfg.gate.wm_transitions
        return uniq[-n:] if n else uniq

    def world_model(self, version: int, data: list) -> dict:
        from evaluation.eval.sources import load_checkpoint
        from evaluation.eval.world_model import world_model_fidelity
        from models.world_model.runner import WorldModelRunner

        if not data:
            return {"score": None, "reason": "no held-out real transitions yet"}
        key = ("world_model", version, tuple(t.key for t in data))
        if key not in self._cache:
            ck = load_checkpoint(self.cfg, "world_model", str(version))
            try:
                ck.model.eval()
                runner = WorldModelRunner(
                    ck.model,
                    ck.tokenizer,
                    self.cfg.dream,
                    max_positions=int(ck.model.config.max_position_embeddings),
                    world_model_version=version,
                )
                fid = world_model_fidelity(runner, data)
            finally:
                ck.close()
            self._cache[key] = {
                "score": float(fid[self.cfg.gate.wm_metric]),
                "n": fid["n"],
                **{k: v for k, v in fid.items() if isinstance(v, float)},
            }
        return self._cache[key]

    def policy(self, version: int) -> dict:
        from evaluation.eval.policy import run_live_policy
        from evaluation.eval.sources import load_checkpoint
        from models.policy.runner import PolicyRunner

        tasks, seeds = probe_tasks(self.cfg), probe_seeds(self.cfg)
        key = ("policy", version, tuple(tasks), tuple(seeds), self.cfg.gate.max_steps)
        if key not in self._cache:
            ck = load_checkpoint(self.cfg, "policy", str(version))
            try:
                ck.model.eval()
                mcfg = dataclasses.replace(
                    self.cfg.model, max_positions=int(ck.model.config.max_position_embeddings)
                )
                runner = PolicyRunner(ck.model, ck.tokenizer, mcfg, policy_version=version, seed=0)
                cfg = dataclasses.replace(
                    self.cfg,
                    collector=dataclasses.replace(
                        self.cfg.collector, max_steps=self.cfg.gate.max_steps
                    ),
                )
                rows = run_live_policy(
                    cfg,
                    runner,
                    tasks,
                    seeds,
                    greedy=True,
                    deadline_s=float(self.cfg.gate.policy_timeout_s) or None,
                )
            finally:
                ck.close()
            ok = [r for r in rows if "error" not in r]
            late = sum(r.get("error") == "deadline" for r in rows)
            self._cache[key] = {
                # a probe cut by its deadline has no score (a partial one would favour fast failures)
                "score": sum(r["success"] for r in ok) / len(ok) if ok and not late else None,
                "episodes": len(rows),
                "errors": len(rows) - len(ok),
                "past_deadline": late,
            }
        return self._cache[key]

    def score(self, versions: dict[str, int | None], data: list | None) -> dict[str, dict]:
        """Per probe, the score of ``versions[probe]`` (a probe is named after the model kind it loads)."""
        out = {}
        for probe in self.cfg.gate.probes:
            version = versions.get(probe)
            if version is None:
                out[probe] = {"score": None, "reason": f"no {probe} version"}
                continue
            try:
                out[probe] = {
                    "version": version,
                    **(
                        self.world_model(version, data or [])
                        if probe == "world_model"
                        else self.policy(version)
                    ),
                }
            except Exception as e:  # noqa: BLE001 - a version that cannot be loaded or run has no score
                log.warning("probe %s of v%d failed: %s", probe, version, e)
                out[probe] = {"version": version, "score": None, "error": str(e)[:300]}
        return out


# --- the gate ---------------------------------------------------------------------------


class Gate:
    def __init__(
        self,
        cfg: Config,
        store: CheckpointStore | None = None,
        probes: Probes | None = None,
        stop: threading.Event | None = None,
    ):
        from core.s3 import make_client

        self.cfg = cfg
        self.run = cfg.run_id
        self.store = store or CheckpointStore(make_client(cfg), cfg.s3.bucket, cfg.run_id)
        self.probes = probes or Probes(cfg)
        self.stop = stop or threading.Event()
        self._pub: Any = None
        unknown = set(cfg.gate.probes) - {"world_model", "policy"}
        if unknown:
            raise ValueError(
                f"unknown gate probes {sorted(unknown)} (gate.probes: world_model, policy)"
            )
        if cfg.gate.wm_metric not in WM_METRICS:
            raise ValueError(
                f"gate.wm_metric={cfg.gate.wm_metric!r}; choose one of {', '.join(WM_METRICS)}"
            )
        if "policy" in cfg.gate.probes:
            probe_seeds(cfg)  # seeds inside the training range are a config error, said at start
            from collectors.tasks import get_task

            for t in probe_tasks(cfg):
                get_task(t)
        for d in DECISIONS:
            GATE_DECISIONS.labels(self.run, d)
        GATE_ERRORS.labels(self.run)

    def margins(self) -> dict[str, float]:
        g = self.cfg.gate
        return {p: (g.wm_margin if p == "world_model" else g.policy_margin) for p in g.probes}

    def candidates(self) -> list[int]:
        """Undecided versions (both kinds written) newer than LATEST and every decided version, oldest first."""
        both = set(self.store.versions(KINDS[0]))
        for kind in KINDS[1:]:
            both &= set(self.store.versions(kind))
        lat = self.store.latest("policy")
        floor = lat["version"] if lat else -1
        decided = self.store.decisions("policy")
        if decided:
            floor = max(floor, max(decided))
        return sorted(v for v in both if v > floor)

    def run_once(self) -> dict | None:
        """Decide the newest candidate (older ones are superseded); None when there is none."""
        pending = self.candidates()
        if not pending:
            return None
        version = pending[-1]
        for old in pending[:-1]:
            self._record(
                old, {"decision": "superseded", "by": "gate", "reason": f"v{version} is newer"}
            )
            GATE_DECISIONS.labels(self.run, "superseded").inc()
        return self.evaluate(version)

    def evaluate(self, version: int) -> dict:
        t0 = time.time()
        lat = {k: self.store.latest(k) for k in KINDS}
        base_vs = {k: (lat[k]["version"] if lat[k] else None) for k in KINDS}
        base_v = base_vs["policy"]
        data = self.probes.heldout() if "world_model" in self.cfg.gate.probes else None
        cand = self.probes.score({k: version for k in KINDS}, data)
        base = self.probes.score(base_vs, data) if base_v is not None else None
        d = decide(
            {p: r.get("score") for p, r in cand.items()},
            None if base is None else {p: r.get("score") for p, r in base.items()},
            self.margins(),
        )
        record = {
            "decision": d.decision,
            "by": "gate",
            "reason": d.reason,
            "baseline_version": base_v,
            "figures": d.figures,
            "candidate_probes": cand,
            "baseline_probes": base,
            "seconds": round(time.time() - t0, 2),
        }
        for p, f in d.figures.items():
            for role in ("candidate", "baseline"):
                if f[role] is not None:
                    GATE_SCORE.labels(self.run, p, role).set(f[role])
        if d.promote:
            from streams.topics import Topics

            run = self.cfg.run_id
            topics = Topics(run, self.cfg.kafka.partitions)
            for kind in KINDS:
                self.store.set_latest(kind, version)
                announce(run, self.cfg.kafka, topics, self.store, kind, version, self._publisher())
        self._record(version, record)
        GATE_DECISIONS.labels(self.run, d.decision).inc()
        GATE_CANDIDATE.labels(self.run).set(version)
        if d.promote or base_v is not None:
            GATE_LATEST.labels(self.run).set(version if d.promote else base_v)
        GATE_SECONDS.labels(self.run).observe(time.time() - t0)
        log.info(
            "gate: v%d %s (LATEST %s): %s",
            version,
            d.decision,
            version if d.promote else base_v,
            d.reason,
        )
        return {"version": version, **record}

    def _record(self, version: int, record: dict) -> None:
        for kind in KINDS:
            try:
                self.store.manifest(kind, version)
            except CorruptCheckpoint:
                continue  # pruned meanwhile: no decision file without a version next to it
            self.store.write_decision(kind, version, record)

    def _publisher(self) -> Any:
        if self._pub is None:
            from streams.kafka import ensure_topics, make_publisher

            ensure_topics(self.cfg)
            self._pub = make_publisher(self.cfg.kafka, client="gate", run=self.cfg.run_id)
        return self._pub

    def loop(self, once: bool = False) -> list[dict]:
        done = []
        while not self.stop.is_set():
            if once:
                res = self.run_once()
                return [res] if res is not None else []
            try:
                res = self.run_once()
            except Exception:  # noqa: BLE001 - S3 or the broker away for a moment: LATEST stays, try again
                log.exception(
                    "gate: deciding failed; retrying in %.0fs", max(5.0, self.cfg.gate.poll_s)
                )
                GATE_ERRORS.labels(self.run).inc()
                self.stop.wait(max(5.0, self.cfg.gate.poll_s))
                continue
            if res is not None:
                done.append(res)
            else:
                self.stop.wait(self.cfg.gate.poll_s)
        return done

    def close(self) -> None:
        if self._pub is not None:
            self._pub.close()


def run_gate(
    cfg: Config, component_id: str, once: bool = False, stop: threading.Event | None = None
) -> list[dict]:
    from core.process import start_component

    stop = start_component(cfg, "gate", component_id, stop)
    if not cfg.gate.enabled:
        log.warning(
            "gate.enabled is false: the trainer moves LATEST itself, so no candidate will wait for "
            "this gate (set gate.enabled=true for the trainer and the gate)"
        )
    gate = Gate(cfg, stop=stop)
    try:
        return gate.loop(once=once)
    finally:
        gate.close()
