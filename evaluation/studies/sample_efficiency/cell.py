"""One cell of the sample-efficiency study: an (arm, seed) run through the real system.

The cell's K demonstrations are imported, then its components (the stream worker, the trainer
and, in the online arms, a latest-policy collector and, in ``dynaweb``, a dream generator) run
under ``core.supervise.Supervisor`` while ``RunWatch`` counts the run's real steps and records its
policy checkpoint announcements straight from the broker.  The cell's training ends when the
trainer announces its last version (``trainer.max_steps``); the collector and the dream generator
are stopped so the counters settle and the components are scraped once more (the diagnostics,
``evaluation.studies.sample_efficiency.diagnostics``).  Then the cell's read-out points
(``evaluation.studies.sample_efficiency.arms``) are evaluated greedily in the live browser on the
evaluation seeds.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from core.config import Config
from core.supervise import Supervisor
from evaluation.studies.sample_efficiency.arm_names import DREAM_ARMS, ONLINE_ARMS
from evaluation.studies.sample_efficiency.arms import matched_points, online_points
from evaluation.studies.sample_efficiency.config import ExperimentConfig, expert_samples_per_step
from evaluation.studies.sample_efficiency.diagnostics import (
    dream_stale,
    scrape_selected,
    topic_stats,
)

LINGER_S = 900  # a finished trainer keeps serving /metrics this long (or until stopped) for the final scrape


class ExperimentError(RuntimeError):
    pass


class RunWatch:
    """Counts a run's real transitions and records its policy checkpoint announcements, straight
    from the broker (no consumer group): ``real_steps`` and ``history`` = [(version, real steps
    counted when the announcement was read)], in announcement order.

    One consumer reads the real and checkpoints topics together, so an announcement is stamped
    with the real steps read before it: the checkpoints topic's one watcher
    (``streams.checkpoints.CheckpointWatcher``) with the real topic added, raw values handed over.
    It connects in its thread; a failure is kept in ``error`` for the controller."""

    def __init__(self, cfg: Config):
        from streams.checkpoints import CheckpointWatcher
        from streams.topics import Topics

        self.cfg = cfg
        self.topics = Topics(cfg.run_id, cfg.kafka.partitions)
        self.real_steps = 0
        self.history: list[tuple[int, int]] = []
        self._keys: set = set()
        self._watcher = CheckpointWatcher(
            cfg.kafka,
            (self.topics.real, self.topics.checkpoints),
            on_value=self._on_value,
            poll_ms=300,
            connect_in_thread=True,
            name="run-watch",
        ).start()

    @property
    def version(self) -> int | None:
        return self.history[-1][0] if self.history else None

    @property
    def error(self) -> BaseException | None:
        return self._watcher.error

    def _on_value(self, topic: str, _partition: int, _offset: int, raw: bytes | None) -> None:
        from streams import records
        from streams.checkpoints import announcement_of
        from streams.kafka import is_control

        if raw is None or is_control(raw):
            return
        if topic != self.topics.real:
            a = announcement_of(raw, ("policy",))
            if a is not None and (not self.history or a.version > self.history[-1][0]):
                self.history.append((int(a.version), self.real_steps))
            return
        try:
            t = records.decode(raw, expect="transition")
        except records.RecordError:
            return
        if t.key not in self._keys:  # a redelivered record is one step
            self._keys.add(t.key)
            self.real_steps += 1

    def close(self) -> None:
        self._watcher.stop(timeout=10)


def check_child_crashes(sup: Supervisor, limit: int = 3) -> None:
    for c in sup.children:
        if c.restarts >= limit:
            raise ExperimentError(
                f"{c.name} crashed {c.restarts} times (exit codes {c.exits}); see {c.log}"
            )


def cell_components(arm: str, run_id: str, contexts: int) -> dict[str, list[str]]:
    """The commands a cell runs.  The trainer stops by itself after ``trainer.max_steps`` and keeps
    serving its counters for the final scrape."""
    comps: dict[str, list[str]] = {
        "stream-worker": ["stream-worker"],
        "trainer": ["train", "--linger", str(LINGER_S)],
    }
    if arm in ONLINE_ARMS:
        comps["collector"] = [
            "collect",
            "--policy",
            "latest",
            "--contexts",
            str(contexts),
            "--id",
            f"collector-{run_id}",
        ]
        if arm in DREAM_ARMS:
            comps["dream"] = ["dream"]
    return comps


def evaluate_points(
    ex: ExperimentConfig, c: Config, picks: list[dict], stop: threading.Event
) -> list[dict]:
    """Each read-out point's version in the live browser on the evaluation seeds, greedy (a version
    read out at several points is evaluated once)."""
    from evaluation.eval.policy import eval_policy

    seeds = list(range(ex.eval_seed_start, ex.eval_seed_start + ex.eval_seeds_per_task))
    cache: dict[int, dict] = {}
    out = []
    for p in picks:
        if stop.is_set():
            raise ExperimentError("stopped during evaluation")
        v = p["version"]
        if v not in cache:
            cache[v] = eval_policy(
                c,
                str(v),
                list(ex.tasks),
                seeds,
                greedy=True,
                contexts=ex.contexts,
                dreams=False,
            )
        r = cache[v]
        out.append(
            {
                **p,
                "success": r["success_rate"],
                "episodes": r["episodes"],
                "timeouts": r["timeouts"],
                "per_task": {t: d["success_rate"] for t, d in r["tasks"].items()},
            }
        )
    return out


@dataclass
class CellRun:
    """One (arm, seed) cell with its resolved config ``cfg`` (``cell_config``); ``run`` returns its
    record (the study writes it to ``cells/<arm>-s<seed>.json``).  ``matched_online``: for
    ``imitation_matched``, the points of the online cells of the same seed."""

    ex: ExperimentConfig
    cfg: Config
    arm: str
    seed: int
    demos: Path
    demo_steps: int
    stop: threading.Event
    say: Callable[[str], None]
    matched_online: list[list[dict]] = field(default_factory=list)
    t0: float = 0.0

    def run(self) -> dict:
        from collectors.demos import import_file
        from streams.kafka import ensure_topics

        c = self.cfg
        comps = cell_components(self.arm, c.run_id, self.ex.contexts)
        final_version = (
            c.trainer.max_steps // c.trainer.checkpoint_every
        )  # one version per checkpoint after v0
        ensure_topics(c)
        import_file(c, self.demos)
        sup = Supervisor(c, comps, once=("trainer",))
        self.say(
            f"{self.arm} seed {self.seed}: run {c.run_id} ({', '.join(comps)}), "
            f"{c.trainer.max_steps} policy steps, logs in {sup.logs}"
        )
        self.t0 = time.time()
        watch = RunWatch(c)
        try:
            periodic = self._train(sup, watch, final_version)
            final_metrics = self._settle_and_scrape(sup, comps, periodic)
        finally:
            sup.stop()
            watch.close()
        history = [(v, self.demo_steps + n) for v, n in watch.history]
        live_steps = watch.real_steps
        train_s = time.time() - self.t0
        points = evaluate_points(self.ex, c, self._read_outs(history, sup.logs), self.stop)
        return self._record(points, history, live_steps, final_metrics, train_s)

    def _train(self, sup: Supervisor, watch: RunWatch, final_version: int) -> dict:
        """Supervise the components until the trainer announces ``final_version`` (its last policy
        step) or exits; returns the last periodic scrape that reached the trainer, a fallback should
        the final scrape miss it."""
        name = f"{self.arm} seed {self.seed}"
        last_print = next_scrape = 0.0
        periodic: dict = {}
        while True:
            sup.supervise()
            check_child_crashes(sup)
            if watch.error is not None:
                raise ExperimentError(
                    f"reading run {self.cfg.run_id} from the broker failed: {watch.error}"
                )
            live, version = watch.real_steps, watch.version
            if time.time() - last_print > 15:
                self.say(
                    f"{name}: policy v{version}/{final_version}, real steps "
                    f"{self.demo_steps + live}, {time.time() - self.t0:.0f}s"
                )
                last_print = time.time()
            if (version is not None and version >= final_version) or sup.child("trainer").done:
                return periodic  # the last policy step is taken (its checkpoint announced)
            if time.time() > next_scrape:
                snap = scrape_selected(self.cfg)
                if "trainer_policy_steps" in snap:
                    periodic = snap
                next_scrape = time.time() + 10
            if self.stop.is_set():
                raise ExperimentError(f"{name}: stopped")
            if time.time() - self.t0 > self.ex.cell_timeout_s:
                raise ExperimentError(
                    f"{name} did not finish in {self.ex.cell_timeout_s:.0f}s "
                    f"(real steps {self.demo_steps + live}, version {version}); logs in {sup.logs}"
                )
            time.sleep(0.3)

    def _settle_and_scrape(self, sup: Supervisor, comps: dict, periodic: dict) -> dict:
        """No more real steps or dreams, so the counters settle; then the final scrape (the periodic
        one if the trainer had exited)."""
        for name in ("collector", "dream"):
            if name in comps:
                sup.stop_one(name)
        final_metrics = scrape_selected(self.cfg)
        if "trainer_policy_steps" not in final_metrics and periodic:
            final_metrics = {**periodic, "trainer_scrape": "periodic (the trainer had exited)"}
        return final_metrics

    def _read_outs(self, history: list[tuple[int, int]], logs: Path) -> list[dict]:
        """The versions to evaluate: ``imitation`` its last checkpoint, ``imitation_matched`` the
        points aligned with the online arms', an online arm ``online_points`` of its history."""
        c, arm, seed, ex = self.cfg, self.arm, self.seed, self.ex
        if arm == "imitation":
            from core.s3 import make_client
            from models.checkpoints.store import CheckpointStore

            latest = CheckpointStore(make_client(c), c.s3.bucket, c.run_id).latest("policy")
            if latest is None:
                raise ExperimentError(
                    f"imitation seed {seed}: no checkpoint in S3 (logs in {logs})"
                )
            version = int(latest["version"])
            return [
                {
                    "budget": None,
                    "version": version,
                    "real_steps": self.demo_steps,
                    "policy_steps": version * c.trainer.checkpoint_every,
                }
            ]
        if not history:
            raise ExperimentError(f"{arm} seed {seed}: the trainer never announced a checkpoint")
        if arm == "imitation_matched":
            picks = matched_points(
                self.matched_online, ex.budget, ex.online_policy_steps, self.demo_steps
            )
            have = {v for v, _ in history}
            missing = sorted({p["version"] for p in picks} - have)
            if missing:
                raise ExperimentError(
                    f"{arm} seed {seed}: versions {missing} were never announced "
                    f"(have {sorted(have)})"
                )
            return picks
        return online_points(history, ex.budget, self.demo_steps)

    def _record(
        self, points: list, history: list, live_steps: int, final_metrics: dict, train_s: float
    ) -> dict:
        c = self.cfg
        diag = {**final_metrics, **topic_stats(c)}
        diag.update(dream_stale(diag))  # with the dream topic's episode count when need be
        return {
            "arm": self.arm,
            "seed": self.seed,
            "run_id": c.run_id,
            "demo_steps": self.demo_steps,
            "points": points,
            "history": history,
            "train_s": round(train_s, 1),
            "eval_s": round(time.time() - self.t0 - train_s, 1),
            "live_steps": int(live_steps),
            "policy_steps": int(c.trainer.max_steps),
            "expert_samples_per_step": c.stream.batch_trajectories
            if c.stream.expert_fraction >= 1
            else expert_samples_per_step(self.ex),
            "diagnostics": diag,
        }
