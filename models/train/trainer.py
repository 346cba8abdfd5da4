"""The trainer's I/O loop around its learner: topics in, checkpoints and announcements out.

The updates themselves are the learner's (``models.train.learner.Learner``: batches in, DeepSpeed
steps of the policy and the world model out); this module feeds it and keeps what it learned.

Inputs (Kafka, manual partition assignment, no consumer group; ``models.train.intake``):
``train.policy`` (mixed TrainingBatch records from the stream worker),
``train.world_model`` (real + expert transitions only, never dreams; into the replay,
``models.train.replay``) and ``eval.world_model`` (held-out real transitions for the rolling
fidelity).  Policy batches come through a consumer of their own, polled only while few wait
(``Intake.poll_into``), so a backlog never holds back the world model's transitions.

Every ``checkpoint_every`` policy steps (or ``checkpoint_every_s``) it writes
both models to S3 (``models.checkpoints.store``), with the offsets it had consumed in
the manifest, moves ``LATEST`` and announces the version; an S3 or broker
outage delays that (retried with back-off, ``models.checkpoints.writer``) and
never ends the trainer, short of ``kafka.producer_dead_after_s``.  Version 0 (the
initial weights) is published before the first step.  After a crash it resumes
from ``LATEST``: versions continue, optimizer state is restored and consumption
restarts at the manifest's offsets.  With ``gate.enabled`` every version after
the first is written as a candidate (``LATEST`` untouched, no announcement;
``evaluation.gate`` promotes it or not), training always continues from the
trainer's own weights, and a restart resumes from the newest version written.

Several ranks (``trainer.ranks`` / ``dynaweb train --ranks N``, or a launcher's WORLD_SIZE): rank 0
is the trainer above (``loop``) and sends every decision to the other ranks
(``models.train.data_parallel``): what to load at the start, each policy and world-model batch
(each rank trains its share; gradients summed over the ranks), each checkpoint (every rank saves
its engine state, rank 0 alone uploads and announces), the stop.  The other ranks (``follow``)
read no topic and write nothing to S3.  A lost rank ends every rank with ``RankLost`` (exit 1),
and the group restarts as one component.

The constructor takes its parts (``models.parts``) and opens nothing;
``models.train.run.build_trainer`` makes them from the config.  What a start loads (resume, or
``trainer.init_from``) is decided in ``models.train.start``.
"""

from __future__ import annotations

import copy
import logging
import random
import shutil
import threading
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import torch

from core.config import Config, ModelConfig
from core.process import trim_heap
from models import metrics as M
from models.checkpoints.spec import check_manifest
from models.checkpoints.store import KINDS, CheckpointStore, wm_init_dir
from models.component import close_component
from models.dream.gate import FidelityWindow
from models.dream.trust import TaskTrust
from models.lm.saved import load_model, make_model, state_has_every_weight
from models.parts import CheckpointSink, ConsumerFactory, Publisher
from models.train.consumed import DreamConsumption
from models.train.data_parallel import RankGroup, follow
from models.train.engine import current_lr
from models.train.intake import Intake
from models.train.learner import Learner
from models.train.prepare import BatchPreparer
from models.train.replay import WorldModelReplay
from models.train.report import export_policy_stats, export_source_stats
from models.train.start import init_dirs, start_plan
from streams import records
from streams.topics import Topics

log = logging.getLogger(__name__)


def build_models(
    model_cfg: ModelConfig,
    policy_dir: Path | None = None,
    wm_dir: Path | None = None,
    resumed: bool = False,
) -> dict:
    """Both kinds as ``(model, tokenizer)``: loaded from their ``hf`` folders, else fresh.  A
    world model started from (not ``resumed``) gets the configured ensemble
    (``model.world_model_ensemble``; fresh members when it had another number)."""
    from models.policy.model import Policy
    from models.world_model.model import WorldModel

    pol = load_model(Policy, str(policy_dir)) if policy_dir else make_model(Policy, model_cfg)
    wm = load_model(WorldModel, str(wm_dir)) if wm_dir else make_model(WorldModel, model_cfg)
    if not resumed and wm[0].set_ensemble(int(model_cfg.world_model_ensemble)):
        log.info("world model: %d fresh ensemble members", model_cfg.world_model_ensemble)
    return {"policy": pol, "world_model": wm}


@dataclass
class LeaderParts:
    """What rank 0 alone has (the other ranks read no topic and write nothing to S3): the run's
    topics, a publisher (progress messages), the checkpoint sink (uploads and announcements) and
    the factory its two consumers are opened with in ``setup``."""

    topics: Topics
    pub: Publisher
    writer: CheckpointSink
    open_consumer: ConsumerFactory


class Trainer:
    """One trainer rank's I/O around its ``Learner``: ``setup`` (resume or start, engines,
    version 0, consumers), ``loop`` on rank 0 (poll, train, checkpoint, report progress),
    ``follow`` on the others, ``close``."""

    preparer: BatchPreparer | None = None  # builds the next batch ahead (set up with the tokenizer)

    def __init__(
        self,
        cfg: Config,
        learner: Learner,
        store: CheckpointStore,
        work: Path,
        leader_parts: LeaderParts | None = None,
        stop: threading.Event | None = None,
    ):
        """``learner``: this rank's updates (its ``group``: this rank's place, None: the only
        rank); ``store``: this run's checkpoints (resume, and ``trainer.init_from``'s other run
        through its client); ``work``: a scratch folder, removed by ``close``;
        ``leader_parts``: rank 0's (None on the other ranks)."""
        self.cfg = cfg
        self.stop = stop or threading.Event()
        self.run = cfg.run_id
        self.learner = learner
        self.group: RankGroup | None = learner.group
        self.leader = self.group is None or self.group.leader
        assert (leader_parts is not None) == self.leader, "rank 0 alone has the topics and S3 sink"
        self.rank = learner.rank  # the per-rank metrics' label
        self.store = store
        self.topics = leader_parts.topics if leader_parts else None
        self.pub = leader_parts.pub if leader_parts else None
        self.writer = leader_parts.writer if leader_parts else None
        self.work = work
        self.version = 0
        self.replay = WorldModelReplay()  # the world-model topics' transitions (sizes: replay.py)
        # the topics read, and the offsets consumed (its consumers: rank 0's, opened by setup())
        self.intake = Intake(
            self.topics, leader_parts.open_consumer if leader_parts else None, self.run, self.replay
        )
        self.fidelity_window = FidelityWindow()  # what dream.wm_gate reads from the manifest
        self.task_trust = TaskTrust(cfg.dream.trust_window)  # what dream.trust_gate reads
        self.batches_consumed = 0
        self.consumed_by_worker: dict[str, int] = {}  # per stream worker: lag is per worker
        self.dreams_consumed = DreamConsumption()  # per dream producer: its pacing signal
        self.last_ckpt_time = time.time()
        # trainer.upload_in_background: (version, its upload, when it was started), not announced
        self.pending_upload: tuple[int, Future, float] | None = None
        self.uploads: ThreadPoolExecutor | None = None

    @property
    def offsets(self) -> dict[str, dict[int, int]]:
        """What rank 0 consumed: the next offset per topic and partition (a checkpoint's)."""
        return self.intake.offsets

    @property
    def policy_steps(self) -> int:
        return self.learner.policy_steps

    @property
    def wm_steps(self) -> int:
        return self.learner.wm_steps

    # --- setup and resume -------------------------------------------------------
    def setup(self) -> None:
        torch.manual_seed(self.cfg.model.seed)
        random.seed(self.cfg.model.seed)
        plan = self._start_plan()
        lat = plan["resume"].get("policy")
        dirs: dict[str, Path] = {}
        manifest = None
        if lat is not None:
            for kind in KINDS:
                kl = plan["resume"].get(kind)
                if kl is None:
                    continue
                dest = self.work / f"resume-{kind}"
                # a stored model this configuration does not ask for stops here (spec.py)
                check_manifest(self.store.manifest(kind, kl["version"])[0], self.cfg.model)
                m = self.store.download(kind, kl["version"], dest, kl["manifest_sha256"])
                dirs[kind] = dest
                if self.leader:
                    M.TRAINER_VERSION.labels(self.run, kind).set(kl["version"])  # shown at once
                if kind == "policy":
                    manifest = m
            self.version = lat["version"]
        elif self.cfg.trainer.init_from:
            dirs = init_dirs(self.store, self.cfg.trainer.init_from, self.work, plan["init"])
        wm_dir = dirs.get("world_model") and dirs["world_model"] / "hf"
        if lat is None and self.cfg.trainer.wm_init_from:  # a fresh run: the offline world model
            wm_dir = wm_init_dir(self.cfg.trainer.wm_init_from)
            log.info("world model initialised from %s", wm_dir)
        models = build_models(
            self.cfg.model, dirs.get("policy") and dirs["policy"] / "hf", wm_dir, lat is not None
        )
        lrn = self.learner
        self.preparer = BatchPreparer(
            models["policy"][1],
            self.cfg.model.max_positions,
            self.cfg.trainer.policy_temperature,
            *((self.group.rank, self.group.world) if self.group is not None else ()),
        )
        lrn.start(models["policy"], models["world_model"])
        if manifest is not None:
            for kind, engine in lrn.engines():
                state = dirs.get(kind, Path("/nonexistent")) / "state"
                if state.exists():
                    strict = state_has_every_weight(dirs[kind] / "hf", engine.module)
                    lrn.collective(
                        lambda e=engine, st=state, s=strict: e.load_checkpoint(
                            str(st), tag="ds", load_module_strict=s
                        )
                    )
            extra = manifest.get("extra", {})
            lrn.policy_steps = int(extra.get("policy_steps", 0))
            lrn.wm_steps = int(extra.get("wm_steps", 0))
            # what the checkpoint's offsets stand for: the stream workers' back-pressure compares
            # their batches with these counts, so they must not restart from 0 with the trainer
            # (after a trainer and a worker restart the lag stayed over its bound for good and the
            # worker emitted no batch again: found by the soak, docs/reliability.md)
            self.batches_consumed = int(extra.get("batches_consumed", 0))
            self.consumed_by_worker = {
                str(w): int(n) for w, n in (extra.get("consumed_by_worker") or {}).items()
            }
            self.intake.offsets = {
                t: {int(p): int(o) for p, o in parts.items()}
                for t, parts in manifest.get("offsets", {}).items()
            }
            log.info(
                "resumed from v%d (policy step %d, offsets %s)",
                self.version,
                self.policy_steps,
                self.offsets,
            )
        elif self.leader:  # version 0 before the first step (the other ranks save in ``follow``)
            self.waiting("models", False)
            self.waiting("checkpoint_v0", True)
            self.checkpoint(background=self.cfg.trainer.upload_in_background)
        if self.leader:
            self.waiting("models", False)
            self.waiting("checkpoint_v0", False)
            self.waiting("policy_batch", self.policy_steps == 0)
            self.waiting(
                "wm_transitions", self.wm_steps == 0 and self.cfg.trainer.train_world_model
            )
            self.intake.open()

    def waiting(self, phase: str, now: bool) -> None:
        """Export what this trainer waits on before its first updates (``M.TRAINER_WAITING``)."""
        M.TRAINER_WAITING.labels(self.run, phase).set(1 if now else 0)

    def _start_plan(self) -> dict:
        """What this start loads (``models.train.start.start_plan``).  Rank 0 decides and sends
        it; the other ranks load the same."""
        if not self.leader:
            cmd = self.group.receive()
            assert cmd[0] == "plan", cmd[0]
            return cmd[1]
        plan = start_plan(self.store, self.cfg.gate.enabled, self.cfg.trainer.init_from)
        if self.group is not None:
            self.group.send(("plan", plan))
        return plan

    # --- checkpoints --------------------------------------------------------------
    def checkpoint(self, background: bool = False) -> None:
        """Write both models as ``self.version`` (upload and announcement retried through S3 and
        broker outages: ``models.checkpoints.writer``).  Several ranks: every rank saves its engine
        state into rank 0's directories (``save_states``; the ranks' optimizer shards under ZeRO
        1-3), then rank 0 alone uploads and announces.  ``background``: the upload runs in a
        thread and ``finish_checkpoint`` announces it (the loop's, with
        ``trainer.upload_in_background``)."""
        self.finish_checkpoint()  # the version before is announced first: versions in order
        t0 = time.time()
        lrn = self.learner
        models = (
            ("policy", lrn.p_engine, lrn.tokenizer),
            ("world_model", lrn.w_engine, lrn.wm_tokenizer),
        )
        dirs = {}
        # before any update the engines hold nothing but the weights hf/ has (no optimizer moments,
        # the schedule at step 0), so the state is not written: version 0 costs half the bytes,
        # and a resume from it makes the same fresh engines
        with_state = self.policy_steps > 0 or self.wm_steps > 0
        for kind, engine, tok in models:
            d = self.work / f"ckpt-{kind}-{self.version}"
            if d.exists():
                shutil.rmtree(d)
            (d / "hf").mkdir(parents=True)
            engine.module.save_pretrained(str(d / "hf"))
            tok.save_pretrained(str(d / "hf"))
            if with_state:
                dirs[kind] = str(d / "state")
        if self.group is not None:
            self.group.send(("checkpoint", self.version, dirs))
        lrn.save_states(dirs)
        extra = {
            "policy_steps": self.policy_steps,
            "wm_steps": self.wm_steps,
            "batches_consumed": self.batches_consumed,
            "consumed_by_worker": dict(self.consumed_by_worker),
            "wm_gate": self.fidelity_window.summary(),  # models/dream/gate.py
            "task_trust": self.task_trust.summary(),  # models/dream/trust.py
            "ranks": 1 if self.group is None else self.group.world,  # who trained it
        }
        args = (self.version, self.cfg.to_dict(), copy.deepcopy(self.offsets), extra)
        if not background:
            self._announce(self.version, self._upload(*args), t0)
            return
        if self.uploads is None:
            self.uploads = ThreadPoolExecutor(1, thread_name_prefix="checkpoint-upload")
        self.pending_upload = (self.version, self.uploads.submit(self._upload, *args), t0)

    def _upload(self, version: int, cfg_dict: dict, offsets: dict, extra: dict) -> list:
        """Both kinds' files, manifests and (unless gated) ``LATEST``; what is to be announced.
        S3 only (the publisher is the loop's), so it may run in the upload thread."""
        gated = self.cfg.gate.enabled
        to_announce = []
        assert self.writer is not None
        for kind in ("policy", "world_model"):
            d = self.work / f"ckpt-{kind}-{version}"
            # gated: a candidate (LATEST stays; `dynaweb gate` decides), except the very first version
            publish = not gated or self.writer.latest(kind) is None
            saved = self.writer.upload(
                kind, version, d, cfg_dict, offsets, extra, set_latest=publish
            )
            if publish:
                to_announce.append(saved)
            M.TRAINER_VERSION.labels(self.run, kind).set(version)
            M.TRAINER_CKPT_TIME.labels(self.run, kind).set(time.time())
            shutil.rmtree(d)
        return to_announce

    def _announce(self, version: int, to_announce: list, t0: float) -> None:
        """Announce the uploaded version (once both are LATEST: a reader woken by the first loads
        the pair at once), flush, prune."""
        assert self.writer is not None
        gated = self.cfg.gate.enabled
        for saved in to_announce:
            self.writer.announce(saved)
            if gated:
                reason = "first version (no LATEST yet)"
                decision = {"decision": "promoted", "by": "trainer", "reason": reason}
                self.writer.write_decision(saved.kind, version, decision)
        self.writer.flush()
        self.writer.prune(self.cfg.trainer.keep_checkpoints)
        self.last_ckpt_time = time.time()
        M.TRAINER_PHASE.labels(self.run, "checkpoint", self.rank).observe(time.time() - t0)
        log.info(
            "checkpoint v%d written in %.2fs%s",
            version,
            time.time() - t0,
            " (candidate: the gate decides whether it becomes LATEST)" if gated else "",
        )

    def finish_checkpoint(self, wait: bool = True) -> None:
        """Announce the version whose upload ran in the background once it is done (``wait``:
        wait for it; else only if done).  An upload that failed raises here."""
        if self.pending_upload is None:
            return
        version, upload, t0 = self.pending_upload
        if not wait and not upload.done():
            return
        self.pending_upload = None
        self._announce(version, upload.result(), t0)

    # --- steps ----------------------------------------------------------------
    def policy_step(self, item: tuple) -> bool:
        """Train one polled batch; False when nothing was trained (a skipped record, or a mixed batch whose
        online trajectories were all stale: it is skipped whole, so stale batches cost no optimizer step and
        move no version, and the trainer catches up with a backlog instead of making it staler)."""
        batch, topic, partition, next_offset = item
        if batch is None:
            self.intake.advance(topic, partition, next_offset)
            return False
        t0 = time.time()
        all_trajs, prepared = self.preparer.take(batch) if self.preparer else (batch.trajs(), None)
        trajs = self.drop_stale(all_trajs)
        if batch.kind == "mixed" and all(t.source == "expert" for t in trajs):
            M.TRAINER_BATCH_KIND.labels(self.run, "stale_skipped").inc()
            self._count_consumed(batch)
            self.intake.advance(topic, partition, next_offset)
            return False
        if self.group is not None:
            self.group.send(("policy", trajs))
        loss, stats, gn = self.learner.policy_update(trajs, prepared, t0)
        if self.policy_steps == 1:
            log.info("first policy update: %d trajectories in %.1fs", len(trajs), time.time() - t0)
        self.dreams_consumed.add(trajs)
        M.TRAINER_STEPS.labels(self.run, "policy").inc()
        M.TRAINER_BATCH_KIND.labels(self.run, batch.kind).inc()
        M.TRAINER_GRAD_NORM.labels(self.run, "policy").set(gn)
        M.TRAINER_LR.labels(self.run, "policy").set(current_lr(self.learner.p_engine))
        M.TRAINER_LOSS.labels(self.run, "policy", "total").set(float(loss.detach()))
        export_policy_stats(self.run, stats)
        export_source_stats(self.run, stats)
        self._count_consumed(batch)
        self.intake.advance(topic, partition, next_offset)
        return True

    def _count_consumed(self, batch: records.TrainingBatch) -> None:
        self.batches_consumed += 1
        self.consumed_by_worker[batch.worker_id] = (
            self.consumed_by_worker.get(batch.worker_id, 0) + 1
        )

    def drop_stale(self, trajs: list[records.Trajectory]) -> list[records.Trajectory]:
        """Staleness enforced where samples are used: non-expert trajectories made by a policy older
        than ``version - stream.max_staleness`` are dropped and counted (batches may have waited in
        Kafka and in this trainer since the stream worker checked them)."""
        floor = self.version - int(self.cfg.stream.max_staleness)
        kept = []
        for t in trajs:
            if t.source != "expert" and t.policy_version < floor:
                M.TRAINER_STALE.labels(self.run, t.source).inc()
            else:
                kept.append(t)
        return kept

    def wm_step(self) -> None:
        t0 = time.time()
        n = self.cfg.trainer.wm_batch
        share = self.cfg.trainer.wm_terminal_share
        batch = self.replay.batch(n, share)
        if not batch:
            return
        if self.group is not None:
            self.group.send(("world_model", batch))
        loss, stats, gn = self.learner.wm_update(batch)
        M.TRAINER_STEPS.labels(self.run, "world_model").inc()
        M.TRAINER_GRAD_NORM.labels(self.run, "world_model").set(gn)
        M.TRAINER_LR.labels(self.run, "world_model").set(current_lr(self.learner.w_engine))
        for k in ("lm_loss", "infonce", "reward_head_loss", "done_head_loss", "ensemble_head_loss"):
            if k in stats:
                M.TRAINER_LOSS.labels(self.run, "world_model", k.removesuffix("_loss")).set(
                    float(stats[k])
                )
        M.TRAINER_LOSS.labels(self.run, "world_model", "total").set(float(loss.detach()))
        if self.wm_steps == 1:
            log.info(
                "first world-model update: %d transitions in %.1fs", len(batch), time.time() - t0
            )

    def judge_trust(self) -> None:
        """Judge the world model on the real episode ends that arrived since the last step, before
        it trains on them (``models.train.trust_judge``), and export each task's trust."""
        ends = self.replay.take_unjudged()
        if not ends:
            return
        from models.dream.trust import MEASURES, task_trusted
        from models.train.trust_judge import judge_episode_ends

        engine = self.learner.w_engine
        engine.eval()
        judged = judge_episode_ends(engine.module, self.learner.wm_tokenizer, ends, self.cfg.dream)
        for task, predicted, real in judged:
            self.task_trust.add(task, predicted, real)
        d = self.cfg.dream
        for task, m in self.task_trust.summary().items():
            for k in MEASURES:
                M.TRAINER_TASK_TRUST.labels(self.run, task, k).set(float(m[k]))
            ok = task_trusted(m, d.trust_min_accuracy, d.trust_max_gap, d.trust_min_episodes)
            M.TRAINER_TASK_TRUST.labels(self.run, task, "gated").set(float(ok))

    def report_fidelity(self) -> None:
        if not self.replay.eval_window:
            return
        from models.world_model.runner import WorldModelRunner
        from models.world_model.scores import fidelity

        sample = list(self.replay.eval_window)[-8:]
        engine = self.learner.w_engine
        engine.eval()
        runner = WorldModelRunner(engine.module, self.learner.wm_tokenizer, self.cfg.dream)
        from core.spaces import Observation, parse_action

        preds = runner.predict(
            [Observation.from_dict(t.obs) for t in sample], [parse_action(t.action) for t in sample]
        )
        fid = fidelity(
            preds,
            [Observation.from_dict(t.next_obs) for t in sample],
            [t.reward for t in sample],
            [t.done for t in sample],
        )
        self.fidelity_window.add(preds, [t.next_obs["tree"] for t in sample])
        # the gate's window (the last wm_gate.WINDOW checked transitions), beside this check's 8
        for k, v in self.fidelity_window.summary().items():
            M.TRAINER_FIDELITY.labels(self.run, f"window_{k}").set(float(v))
        for k, v in fid.items():
            if isinstance(v, int | float):
                M.TRAINER_FIDELITY.labels(self.run, k).set(float(v))

    def publish_progress(self) -> None:
        self.pub.send(
            self.topics.control,
            records.Control(
                self.run,
                "consumed",
                "trainer",
                float(self.batches_consumed),
                info={
                    "policy_steps": self.policy_steps,
                    "version": self.version,
                    "by_worker": dict(self.consumed_by_worker),
                    "dreams": self.dreams_consumed.report(
                        self.version, self.cfg.stream.max_staleness
                    ),
                },
            ),
        )

    # --- loop --------------------------------------------------------------------
    def loop(self) -> None:
        tc = self.cfg.trainer
        last_progress = 0.0
        pending: deque = deque()
        while not self.stop.is_set():
            t0 = time.time()
            self.finish_checkpoint(wait=False)  # an upload done in the background: announce it
            self.intake.poll_into(pending)
            did = False
            while pending and pending[0][0] is None:
                self.policy_step(pending.popleft())  # skipped records: advance the offset only
            item = pending.popleft() if pending else None
            if self.preparer is not None:
                self.preparer.prepare(pending)  # the next batch, while this one trains
            # always-on: the world model's first update does not wait behind a policy update (with
            # a large model one takes minutes on a CPU); a fixed ratio keeps its order
            wm_first = self.wm_steps == 0 and tc.wm_steps_per_policy_step <= 0
            wm_first = wm_first and bool(self.replay) and tc.train_world_model
            if wm_first:
                self.judge_trust()
                self.wm_step()
                did = True
                self.waiting("wm_transitions", False)
            if item is not None and self.policy_step(item):
                did = True
                if self.policy_steps == 1:
                    self.waiting("policy_batch", False)
                due = self.policy_steps % tc.checkpoint_every == 0
                if due or time.time() - self.last_ckpt_time > tc.checkpoint_every_s:
                    self.version += 1
                    self.report_fidelity()
                    self.checkpoint(background=tc.upload_in_background)
            if not wm_first and self.replay and tc.train_world_model and self._wm_due():
                self.judge_trust()  # the new real episode ends, before the step trains on them
                self.wm_step()
                did = True
                if self.wm_steps == 1:
                    self.waiting("wm_transitions", False)
            if did:
                trim_heap()  # a step's peak is not kept as resident memory (core.process)
            else:
                M.TRAINER_IDLE.labels(self.run).inc(time.time() - t0)
            if time.time() - last_progress > 1.0:
                self.publish_progress()
                last_progress = time.time()
            self.pub.check()
            if self.group is not None:
                self.group.watch()  # a follower that stopped beating stops the group
            if tc.max_steps and self.policy_steps >= tc.max_steps:
                log.info("reached max_steps=%d", tc.max_steps)
                break

    def _wm_due(self) -> bool:
        """World-model steps run whenever there is time, or (``wm_steps_per_policy_step`` > 0) at a
        fixed ratio to policy steps, so a run's world model does not depend on the machine's speed."""
        r = self.cfg.trainer.wm_steps_per_policy_step
        return r <= 0 or self.wm_steps < r * max(1, self.policy_steps)

    def follow(self) -> None:
        """A rank other than 0, after ``setup``: rank 0's commands until it stops the group
        (``models.train.data_parallel.follow``)."""
        assert self.group is not None and not self.leader
        follow(self.group, self.learner)

    def close(self) -> None:
        try:
            if self.leader and not self.stop.is_set():
                self.finish_checkpoint()  # a version uploading in the background is announced
        finally:
            if self.uploads is not None:
                self.uploads.shutdown(wait=False, cancel_futures=True)
        if self.preparer is not None:
            self.preparer.close()
        if self.group is not None:
            self.group.close()
        if not self.leader:
            shutil.rmtree(self.work, ignore_errors=True)
            return
        try:
            if self.intake.batch_consumer is not None:
                self.intake.batch_consumer.close()
        finally:
            close_component(self.intake.consumer, self.pub, self.work)
