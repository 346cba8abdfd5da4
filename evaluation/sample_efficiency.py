"""``dynaweb experiment sample-efficiency``: does training by imagination save real interactions?

Four arms, each run through the real system (the broker, the stream worker, the
DeepSpeed trainer, S3 checkpoints, Playwright collectors and, in ``dynaweb``, a dream
generator: the same processes as ``dynaweb up``), one run id per (arm, seed):

1. ``imitation``: the policy trained by behaviour cloning on K demonstrations per task
   (``stream.expert_fraction=1``; the world model trains on the same demonstrations).
   Its checkpoint is where every other arm starts (``trainer.init_from``).
2. ``imitation_matched``: the control for "more behaviour-cloning updates": from arm 1's
   checkpoint, exactly ``online_policy_steps`` policy steps on expert-only batches of
   ``expert_samples_per_step(ex)`` demonstrations each, i.e. the same optimizer steps, the
   same demonstration samples per step, the same learning rate and initialisation as the
   online arms, and no interaction at all.
3. ``real_only``: from arm 1's checkpoint, GSPO on groups collected in the live browser
   (G rollouts of one seed, ``collector.group_size``), paced on-policy: one group per
   policy version (``collector.groups_per_version=1``); demonstrations mixed in at
   ``expert_fraction``.
4. ``dynaweb``: from arm 1's checkpoint (policy and world model), the dream generator
   produces the GSPO groups; real interactions go only to a share of on-policy real
   groups (``dream_real_share`` groups per version), which also refresh the world model.

Arms 2-4 take exactly ``online_policy_steps`` policy optimizer steps (``trainer.max_steps``,
one checkpoint per step, so version = policy steps); a cell ends when its trainer
announces that last version.  Real steps are counted on the broker; demonstration steps
count.  While a cell runs, the controller records which checkpoint version existed at
which real-step count; each budget point evaluates the newest version announced no later
than that count (so a point never uses more real steps than its budget), then the final
version (``budget`` None) is evaluated at the real steps it had used.  ``imitation_matched``
spends no real steps: its point i is read out at the largest policy-step count an online
arm of the same seed had at its point i (the final point: ``online_policy_steps``).
Evaluation: the live browser on the evaluation seeds, greedy, success = MiniWoB's raw
reward > 0.

The GSPO diagnostics (groups that reached the loss, and how many with a nonzero
advantage, per source) are read from the trainer's own counters (its /metrics; the
trainer keeps serving them after its last step, ``dynaweb train --linger``), never
recomputed from topics.

Resume: every finished cell writes ``cells/<arm>-s<seed>.json``; a rerun with the same
``--out`` skips those and restarts unfinished cells under a fresh run id.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import shlex
import sys
import time
import uuid
from pathlib import Path

from core.config import Config, ExperimentConfig
from evaluation.sample_efficiency_report import ARMS, ONLINE_ARMS, pooled_gspo, write_all

log = logging.getLogger(__name__)

QUICK = {  # --quick: every artifact through every real component in a few minutes, not a result
    "tasks": ["miniwob/click-collapsible", "miniwob/enter-text"],
    "demos_per_task": 2,
    "seeds": [0],
    "budget": [14, 22, 30],
    "imitation_steps": 3,
    "online_policy_steps": 3,
    "group_size": 2,
    "batch_trajectories": 4,
    "dream_real_share": 0.5,
    "dream_horizon": 2,
    "max_steps": 4,
    "eval_seeds_per_task": 2,
    "layers": 1,
    "d_model": 64,
    "heads": 2,
    "cell_timeout_s": 240.0,
}
REWARD = "binary: 1 if MiniWoB's raw reward > 0 else 0 (live and dreamed groups; evaluation counts the same success)"
LINGER_S = 900  # a finished trainer keeps serving /metrics this long (or until stopped) for the final scrape


class ExperimentError(RuntimeError):
    pass


def resolve_experiment(cfg: Config, quick: bool) -> ExperimentConfig:
    ex = copy.deepcopy(cfg.experiment)
    if quick:
        for k, v in QUICK.items():
            setattr(ex, k, copy.deepcopy(v))
    bad = [a for a in ex.arms if a not in ARMS]
    if bad:
        raise ValueError(f"experiment.arms: unknown {bad}; choose from {list(ARMS)}")
    if "imitation" not in ex.arms:
        raise ValueError(
            "experiment.arms must include 'imitation' (every other arm starts from its checkpoint)"
        )
    if sorted(ex.budget) != list(ex.budget) or len(ex.budget) < 1:
        raise ValueError(f"experiment.budget must be increasing real-step counts, got {ex.budget}")
    if not 0 < ex.dream_real_share <= 1:
        raise ValueError("experiment.dream_real_share must be in (0, 1]")
    if ex.online_policy_steps < 1 or ex.imitation_steps < 1:
        raise ValueError("experiment.online_policy_steps and imitation_steps must be >= 1")
    if not 0 < ex.expert_fraction < 1:
        raise ValueError(
            "experiment.expert_fraction must be in (0, 1): the online batches hold experts and groups"
        )
    if expert_samples_per_step(ex) < 1:
        raise ValueError(
            "experiment.batch_trajectories * expert_fraction must give at least one expert per step"
        )
    return ex


def expert_samples_per_step(ex: ExperimentConfig) -> int:
    """Expert (behaviour-cloning) trajectories in every policy step of the online arms, as the hybrid
    mixer (``streams/mixer.py``) builds a mixed batch: whole groups of G up to its non-expert target
    ``round(batch * (1 - f))`` (at least one group), then ``round(f * n_d / (1 - f))`` experts.  With the
    defaults (16, 0.5, G = 8): 8 = ``batch_trajectories * expert_fraction``.  ``imitation_matched`` trains
    on expert-only batches of exactly this size, so every arm gets the same BC samples per step."""
    f = float(ex.expert_fraction)
    target = max(1, int(round(ex.batch_trajectories * (1.0 - f))))
    n_d = ex.group_size * max(1, target // max(1, ex.group_size))
    return int(round(f * n_d / (1.0 - f) + 1e-9))


def experiment_id(ex: ExperimentConfig) -> str:
    import dataclasses

    d = dataclasses.asdict(ex)
    d.pop("cell_timeout_s", None)
    return "se" + hashlib.sha1(json.dumps(d, sort_keys=True).encode()).hexdigest()[:6]


def cell_config(
    base: Config, ex: ExperimentConfig, run_id: str, arm: str, seed: int, init_from: str = ""
) -> Config:
    """The resolved config of one (arm, seed) run: the same model, tokenizer, optimiser and learning rate
    in every arm; every arm but ``imitation`` starts from ``init_from`` (the imitation checkpoint
    'RUN:VERSION', weights only: the optimizer starts fresh in each)."""
    c = copy.deepcopy(base)
    c.run_id = run_id
    if arm != "imitation":
        c.trainer.init_from = init_from
    c.model.layers, c.model.d_model, c.model.heads = ex.layers, ex.d_model, ex.heads
    c.model.seed = int(seed)
    cc = c.collector
    cc.tasks = list(ex.tasks)
    cc.max_steps = ex.max_steps
    cc.episode_time_limit_ms = ex.episode_time_limit_ms
    cc.contexts = ex.contexts
    if ex.eval_seed_start < cc.seed_stop:
        cc.seed_stop = ex.eval_seed_start  # evaluation seeds are never training seeds
    s = c.stream
    s.batch_trajectories = ex.batch_trajectories
    s.group_size = ex.group_size
    s.samples_per_insert = 0  # the K demonstrations are scarce on purpose: reuse them freely
    s.reuse_wait_s = 0.0
    s.max_staleness = 2
    s.heldout_fraction = (
        0.0  # every real interaction is training data here (the budget counts them all)
    )
    t = c.trainer
    t.checkpoint_every_s = 1e9
    t.keep_checkpoints = 1_000_000  # every version may be evaluated afterwards
    t.wm_steps_per_policy_step = ex.wm_steps_per_policy_step
    c.dream.group_size = ex.group_size
    c.dream.horizon = ex.dream_horizon
    c.dream.temperature = (
        ex.temperature
    )  # frozen: live (collectors) and dreamed rollouts sample at it
    t.policy_temperature = (
        ex.temperature
    )  # the trainer's pi_T for BC and records without a temperature
    if arm == "imitation":
        s.expert_fraction = 1.0
        s.cold_start_batch_s = 0.05
        t.max_steps = ex.imitation_steps
        t.checkpoint_every = ex.imitation_steps
    elif arm == "imitation_matched":
        # the online arms' optimizer steps, each on the same number of demonstration samples, from the same
        # checkpoint with the same optimiser and learning rate; nothing but demonstrations
        s.expert_fraction = 1.0
        s.batch_trajectories = expert_samples_per_step(ex)
        s.cold_start_batch_s = 0.05
        t.max_steps = ex.online_policy_steps
        t.checkpoint_every = 1  # every step count can be read out, as in the online arms
        t.train_world_model = (
            False  # nothing dreams from it (the policy's update does not depend on it)
        )
    else:
        s.expert_fraction = ex.expert_fraction
        s.expert_only_batches = False  # every policy step holds an online group
        s.group_timeout_s = 120.0
        t.max_steps = ex.online_policy_steps  # fixed: the cell ends when this many steps are taken
        t.checkpoint_every = 1  # a new version per step: on-policy collectors wait for it
        t.train_world_model = arm == "dynaweb"
        cc.group_size = ex.group_size
        cc.run_length = ex.group_size
        cc.policy = "latest"
        cc.groups_per_version = 1.0 if arm == "real_only" else ex.dream_real_share
        cc.seed_offset = 7919 * (
            int(seed) + 1
        )  # the online arms of one seed walk the same task seeds
    return c


class RunWatch:
    """Counts a run's real transitions and records its policy checkpoint announcements, straight
    from the broker (no consumer group): ``real_steps`` and ``history`` = [(version, real steps
    counted when the announcement was read)], in announcement order."""

    def __init__(self, cfg: Config):
        import threading

        from streams.topics import Topics

        self.cfg = cfg
        self.topics = Topics(cfg.run_id, cfg.kafka.partitions)
        self.real_steps = 0
        self.history: list[tuple[int, int]] = []
        self._keys: set = set()
        self._stop = threading.Event()
        self.error: Exception | None = None
        self._thread = threading.Thread(target=self._run, name="run-watch", daemon=True)
        self._thread.start()

    @property
    def version(self) -> int | None:
        return self.history[-1][0] if self.history else None

    def _run(self) -> None:
        from streams import records
        from streams.kafka import assignable, is_control, make_consumer

        try:
            consumer = make_consumer(self.cfg.kafka)
        except Exception as e:  # noqa: BLE001 - surfaced by the controller (``error``)
            self.error = e
            return
        try:
            consumer.assign(assignable(consumer, (self.topics.real, self.topics.checkpoints)))
            consumer.seek_to_beginning()
            while not self._stop.is_set():
                for tp, msgs in consumer.poll(timeout_ms=300).items():
                    for m in msgs:
                        if m.value is None or is_control(m.value):
                            continue
                        try:
                            if tp.topic == self.topics.real:
                                t = records.decode(m.value, expect="transition")
                                if t.key not in self._keys:  # a redelivered record is one step
                                    self._keys.add(t.key)
                                    self.real_steps += 1
                            else:
                                a = records.decode(m.value, expect="checkpoint")
                                if a.kind == "policy" and (
                                    not self.history or a.version > self.history[-1][0]
                                ):
                                    self.history.append((int(a.version), self.real_steps))
                        except records.RecordError:
                            continue
        except Exception as e:  # noqa: BLE001 - surfaced by the controller (``error``)
            self.error = e
        finally:
            consumer.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)


SELECTED = {  # metric -> key kept from a cell's last scrape (summed over label sets), for the diagnostics
    "dynaweb_stream_stale_dropped_trajectories_total": "stale_dropped",
    "dynaweb_stream_dead_letters_total": "dead_letters",
    "dynaweb_dream_world_model_invalid_total": "wm_invalid_outputs",
    "dynaweb_dream_steps_total": "dream_steps",
    "dynaweb_trainer_nonzero_advantage_share": "nonzero_advantage_share_last",
}
# the trainer's per-source counters of what reached the policy loss (models/metrics.py), by exposed sample
# name (a counter is exposed with ``_total``; both spellings of the two sums are accepted)
GSPO_COUNTERS = {
    "dynaweb_trainer_gspo_trajectories_total": "trajectories",
    "dynaweb_trainer_gspo_groups_total": "groups",
    "dynaweb_trainer_gspo_groups_nonzero_total": "groups_nonzero",
    "dynaweb_trainer_gspo_advantage_abs_total": "adv_abs_sum",
    "dynaweb_trainer_gspo_advantage_abs_sum_total": "adv_abs_sum",
    "dynaweb_trainer_gspo_clipped_total": "clipped",
    "dynaweb_trainer_gspo_ratio_total": "ratio_sum",
    "dynaweb_trainer_gspo_ratio_sum_total": "ratio_sum",
    "dynaweb_trainer_stale_dropped_total": "stale_dropped",
    "dynaweb_trainer_ungrouped_total": "ungrouped",
}


def parse_scrape(scraped: list[tuple[dict, str]]) -> dict:
    """The diagnostics kept from one scrape of a run's components (``(target labels, metrics text)``):
    the ``SELECTED`` series summed, and from the trainer only: its optimizer steps per model
    (``trainer_policy_steps``), policy samples per source (``trainer_samples_<source>``) and the GSPO
    counters per source (``gspo``: {source: {groups, groups_nonzero, trajectories, ...}})."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict = {}
    gspo: dict = {}
    for labels, text in scraped:
        trainer = labels.get("component") == "trainer"
        for fam in text_string_to_metric_families(text):
            for smp in fam.samples:
                name, lab, v = smp.name, smp.labels, float(smp.value)
                key = SELECTED.get(name)
                if trainer and name == "dynaweb_trainer_steps_total":
                    key = f"trainer_{lab.get('model', '')}_steps"
                elif (
                    trainer
                    and name == "dynaweb_trainer_samples_total"
                    and lab.get("model") == "policy"
                ):
                    key = f"trainer_samples_{lab.get('source', '')}"
                elif trainer and name in GSPO_COUNTERS:
                    d = gspo.setdefault(lab.get("source", ""), {})
                    d[GSPO_COUNTERS[name]] = round(d.get(GSPO_COUNTERS[name], 0.0) + v, 4)
                    continue
                if key:
                    out[key] = round(out.get(key, 0.0) + v, 4)
    if gspo:
        out["gspo"] = gspo
    return out


def scrape_selected(cfg: Config) -> dict:
    """``parse_scrape`` of the run's live components, read from their /metrics now."""
    from infra.up import scrape_targets

    return parse_scrape(scrape_targets(cfg))


def topic_stats(cfg: Config) -> dict:
    """Read back from the run's topics (labelled ``topic_``: a record of what was produced, not of what
    the trainer learned from): live episodes and their success during training, dreamed rollouts and
    their success.  The GSPO group diagnostics come from the trainer's counters instead."""
    from evaluation.evaluate import read_topic
    from streams.topics import Topics

    topics = Topics(cfg.run_id, cfg.kafka.partitions)
    out: dict = {}
    for name, topic in (("live", topics.real), ("dream", topics.dream)):
        try:
            trans = read_topic(cfg, topic, 60)
        except Exception as e:  # noqa: BLE001 - diagnostics only
            out[f"topic_{name}_error"] = str(e)[:200]
            continue
        last: dict = {}
        for t in trans:
            if t.done or t.truncated:
                last[t.episode_id] = t
        if not last:
            continue
        out[f"topic_{name}_episodes"] = len(last)
        out[f"topic_{name}_success"] = round(
            sum(float(t.reward) > 0 for t in last.values()) / len(last), 4
        )
    return out


def pick_versions(history: list[tuple[int, int]], budget: list[int], demo_steps: int) -> list[dict]:
    """For each budget point, the newest version first seen at a real-step count <= the point.
    ``history`` is [(version, real steps incl. demos when it was first seen)], in order."""
    out = []
    for b in budget:
        ok = [(v, s) for v, s in history if s <= b]
        v, s = ok[-1] if ok else history[0]
        out.append({"budget": int(b), "version": int(v), "real_steps": int(max(s, demo_steps))})
    return out


def online_points(history: list[tuple[int, int]], budget: list[int], demo_steps: int) -> list[dict]:
    """The read-outs of an online cell: ``pick_versions`` at every budget point, then the final version
    (``budget`` None) at the real steps counted when it was announced.  One checkpoint per policy step
    from version 0, so ``policy_steps`` = version."""
    pts = pick_versions(history, budget, demo_steps)
    v, s = history[-1]
    pts.append({"budget": None, "version": int(v), "real_steps": int(max(s, demo_steps))})
    return [dict(p, policy_steps=p["version"]) for p in pts]


def matched_points(
    online: list[list[dict]], budget: list[int], steps: int, demo_steps: int
) -> list[dict]:
    """The read-outs of ``imitation_matched``, aligned with the online arms' points (one per budget point,
    then the final one): point i is its checkpoint after the largest policy-step count that an online arm
    of the same seed had at its point i (``online``: those cells' points), so at no point does an online
    arm have more behaviour-cloning updates than this control; the final point is ``steps``
    (= ``online_policy_steps``, as in every online arm).  Without online cells, evenly spaced.
    ``real_steps`` is the demonstrations only: this arm never interacts."""
    n = len(budget) + 1
    out = []
    for i in range(n):
        have = [
            int(pts[i]["policy_steps"])
            for pts in online
            if i < len(pts) and pts[i].get("policy_steps") is not None
        ]
        if have:
            k = max(have)
        else:
            k = steps if i == n - 1 else int(round(steps * (i + 1) / n))
        k = min(max(k, 0), int(steps))
        out.append(
            {
                "budget": int(budget[i]) if i < len(budget) else None,
                "version": k,
                "policy_steps": k,
                "real_steps": int(demo_steps),
            }
        )
    return out


class SampleEfficiency:
    def __init__(
        self,
        cfg: Config,
        out: Path,
        quick: bool = False,
        start_stack: bool = True,
        echo: bool = True,
        command: str = "",
    ):
        self.base = cfg
        self.ex = resolve_experiment(cfg, quick)
        self.quick = quick
        self.out = Path(out)
        self.start_stack = start_stack
        self.echo = echo
        self.command = command or "dynaweb " + " ".join(shlex.quote(a) for a in sys.argv[1:])
        self.id = experiment_id(self.ex)
        self.cells_dir = self.out / "cells"
        import threading

        self._stop = threading.Event()

    def say(self, msg: str) -> None:
        if self.echo:
            print(f"[experiment {time.strftime('%H:%M:%S')}] {msg}", flush=True)

    # --- bookkeeping ---------------------------------------------------------------
    def _meta_file(self) -> Path:
        return self.out / "experiment.json"

    def _check_out(self) -> None:
        import dataclasses

        self.cells_dir.mkdir(parents=True, exist_ok=True)
        meta = {
            "experiment_id": self.id,
            "quick": self.quick,
            "config": dataclasses.asdict(self.ex),
        }
        f = self._meta_file()
        if f.exists():
            old = json.loads(f.read_text())
            if old.get("experiment_id") != self.id:
                raise ValueError(
                    f"{self.out} holds experiment {old.get('experiment_id')} with another configuration; "
                    f"use a new --out (or delete it) to run {self.id}"
                )
        else:
            f.write_text(json.dumps(meta, indent=1))

    def cell_file(self, arm: str, seed: int) -> Path:
        return self.cells_dir / f"{arm}-s{seed}.json"

    def _new_run_id(self, arm: str, seed: int) -> str:
        att = self.cells_dir / f"{arm}-s{seed}.attempts"
        n = int(att.read_text()) + 1 if att.exists() else 1
        att.write_text(str(n))
        # unique even when --out was deleted while the broker and S3 kept the old runs
        return f"{self.id}-{arm.replace('_', '')}-s{seed}-a{n}-{uuid.uuid4().hex[:4]}"

    # --- demonstrations --------------------------------------------------------------
    def demos(self, seed: int) -> Path:
        """K expert demonstrations per task for this training seed, collected once by a real
        expert collector (through Kafka) and kept as JSONL; every arm imports the same file."""
        path = self.out / f"demos-s{seed}.jsonl"
        if path.exists():
            return path
        from collectors.demos import export_file
        from infra.up import Supervisor
        from streams.kafka import ensure_topics

        run_id = self._new_run_id("demos", seed)
        c = cell_config(self.base, self.ex, run_id, "imitation", seed)
        c.collector.contexts = 1
        c.collector.run_length = self.ex.demos_per_task
        c.collector.seed_offset = 104_729 * (int(seed) + 1)
        n = self.ex.demos_per_task * len(self.ex.tasks)
        ensure_topics(c)
        sup = Supervisor(
            c,
            {
                "demos": [
                    "collect",
                    "--policy",
                    "expert",
                    "--contexts",
                    "1",
                    "--max-episodes",
                    str(n),
                    "--id",
                    f"demos-{run_id}",
                ]
            },
            once=("demos",),
        )
        self.say(f"seed {seed}: collecting {n} expert demonstrations ({run_id})")
        deadline = time.time() + self.ex.cell_timeout_s
        try:
            while not sup.child("demos").done:
                sup.supervise()
                self._check_child_crashes(sup)
                if time.time() > deadline:
                    raise ExperimentError(
                        f"demonstrations for seed {seed} not collected in time (log {sup.logs})"
                    )
                time.sleep(0.3)
        finally:
            sup.stop()
        tmp = path.with_suffix(".tmp.jsonl")
        info = export_file(c, tmp, timeout=60)
        eps = info["episodes"]
        if eps < n:
            raise ExperimentError(
                f"seed {seed}: {eps} of {n} demonstrations reached the expert topic"
            )
        tmp.replace(path)
        self.say(
            f"seed {seed}: {info['transitions']} demonstration steps in {eps} episodes -> {path}"
        )
        return path

    @staticmethod
    def _check_child_crashes(sup, limit: int = 3) -> None:
        for c in sup.children:
            if c.restarts >= limit:
                raise ExperimentError(
                    f"{c.name} crashed {c.restarts} times (exit codes {c.exits}); see {c.log}"
                )

    # --- one cell ----------------------------------------------------------------------
    def run_cell(self, arm: str, seed: int, demos: Path) -> dict:
        from collectors.demos import import_file
        from infra.up import Supervisor
        from streams.kafka import ensure_topics

        demo_steps = sum(1 for line in demos.read_text().splitlines() if line.strip())
        run_id = self._new_run_id(arm, seed)
        init = ""
        if arm != "imitation":
            imit = json.loads(self.cell_file("imitation", seed).read_text())
            init = f"{imit['run_id']}:{imit['points'][-1]['version']}"
        c = cell_config(self.base, self.ex, run_id, arm, seed, init_from=init)
        # the trainer stops by itself after trainer.max_steps and keeps serving its counters for the final scrape
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
                str(self.ex.contexts),
                "--id",
                f"collector-{run_id}",
            ]
            if arm == "dynaweb":
                comps["dream"] = ["dream"]
        final_version = (
            c.trainer.max_steps // c.trainer.checkpoint_every
        )  # one version per checkpoint after v0
        ensure_topics(c)
        import_file(c, demos)
        sup = Supervisor(c, comps, once=("trainer",))
        self.say(
            f"{arm} seed {seed}: run {run_id} ({', '.join(comps)}), {c.trainer.max_steps} policy steps, "
            f"logs in {sup.logs}"
        )
        t0 = time.time()
        watch = RunWatch(c)
        last_print = next_scrape = 0.0
        periodic: dict = {}
        try:
            while True:
                sup.supervise()
                self._check_child_crashes(sup)
                if watch.error is not None:
                    raise ExperimentError(
                        f"reading run {run_id} from the broker failed: {watch.error}"
                    )
                live, version = watch.real_steps, watch.version
                if time.time() - last_print > 15:
                    self.say(
                        f"{arm} seed {seed}: policy v{version}/{final_version}, real steps {demo_steps + live}, "
                        f"{time.time() - t0:.0f}s"
                    )
                    last_print = time.time()
                if (version is not None and version >= final_version) or sup.child("trainer").done:
                    break  # the last policy step is taken (its checkpoint announced)
                if (
                    time.time() > next_scrape
                ):  # a fallback, should the final scrape miss the trainer
                    snap = scrape_selected(c)
                    if "trainer_policy_steps" in snap:
                        periodic = snap
                    next_scrape = time.time() + 10
                if self._stop.is_set():
                    raise ExperimentError(f"{arm} seed {seed}: stopped")
                if time.time() - t0 > self.ex.cell_timeout_s:
                    raise ExperimentError(
                        f"{arm} seed {seed} did not finish in {self.ex.cell_timeout_s:.0f}s "
                        f"(real steps {demo_steps + live}, version {version}); logs in {sup.logs}"
                    )
                time.sleep(0.3)
            for name in ("collector", "dream"):  # no more real steps or dreams: the counters settle
                if name in comps:
                    sup.stop_one(name)
            final_metrics = scrape_selected(c)
            if "trainer_policy_steps" not in final_metrics and periodic:
                final_metrics = {**periodic, "trainer_scrape": "periodic (the trainer had exited)"}
        finally:
            sup.stop()
            watch.close()
        history = [(v, demo_steps + n) for v, n in watch.history]
        live_steps = watch.real_steps
        train_s = time.time() - t0
        if arm == "imitation":
            from core.s3 import make_client
            from models.checkpoint import CheckpointStore

            latest = CheckpointStore(make_client(c), c.s3.bucket, run_id).latest("policy")
            if latest is None:
                raise ExperimentError(
                    f"imitation seed {seed}: no checkpoint in S3 (logs in {sup.logs})"
                )
            version = int(latest["version"])
            picks = [
                {
                    "budget": None,
                    "version": version,
                    "real_steps": demo_steps,
                    "policy_steps": version * c.trainer.checkpoint_every,
                }
            ]
        elif not history:
            raise ExperimentError(f"{arm} seed {seed}: the trainer never announced a checkpoint")
        elif arm == "imitation_matched":
            online = [
                json.loads(self.cell_file(a, seed).read_text())["points"]
                for a in ONLINE_ARMS
                if self.cell_file(a, seed).exists()
            ]
            picks = matched_points(online, self.ex.budget, self.ex.online_policy_steps, demo_steps)
            have = {v for v, _ in history}
            missing = sorted({p["version"] for p in picks} - have)
            if missing:
                raise ExperimentError(
                    f"{arm} seed {seed}: versions {missing} were never announced "
                    f"(have {sorted(have)})"
                )
        else:
            picks = online_points(history, self.ex.budget, demo_steps)
        points = self.evaluate(c, picks)
        diag = {**final_metrics, **topic_stats(c)}
        res = {
            "arm": arm,
            "seed": seed,
            "run_id": run_id,
            "demo_steps": demo_steps,
            "points": points,
            "history": history,
            "train_s": round(train_s, 1),
            "eval_s": round(time.time() - t0 - train_s, 1),
            "live_steps": int(live_steps),
            "policy_steps": int(c.trainer.max_steps),
            "expert_samples_per_step": c.stream.batch_trajectories
            if c.stream.expert_fraction >= 1
            else expert_samples_per_step(self.ex),
            "diagnostics": diag,
        }
        self.cell_file(arm, seed).write_text(json.dumps(res, indent=1))
        self.say(
            f"{arm} seed {seed}: "
            + ", ".join(
                f"{p['policy_steps']} policy / {p['real_steps']} real steps -> "
                f"{100 * p['success']:.0f}%"
                for p in points
            )
            + f" ({time.time() - t0:.0f}s)"
        )
        return res

    def run_cells(self, arms: list[str], seed: int, demos: Path) -> None:
        """The online arms of one seed: at the same time with ``parallel_arms`` (they share only the
        imitation checkpoint; pacing is by policy version, not by time, and each takes a fixed number
        of policy steps, so neither result depends on the other's speed), else one after the other.
        The first failure is raised."""
        if len(arms) < 2 or not self.ex.parallel_arms:
            for a in arms:
                self.run_cell(a, seed, demos)
            return
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(len(arms), thread_name_prefix="cell") as pool:
            futs = [pool.submit(self.run_cell, a, seed, demos) for a in arms]
            try:
                while not all(f.done() for f in futs):
                    if any(f.done() and f.exception() for f in futs):
                        self._stop.set()  # one arm failed: stop the other, report the failure
                    time.sleep(0.5)
            except BaseException:
                self._stop.set()  # Ctrl-C / SIGTERM: the cells stop their processes and end
                raise
            errors = [f.exception() for f in futs]
        for e in errors:
            if e is not None:
                raise e

    def evaluate(self, c: Config, picks: list[dict]) -> list[dict]:
        from evaluation.evaluate import eval_policy

        seeds = list(
            range(self.ex.eval_seed_start, self.ex.eval_seed_start + self.ex.eval_seeds_per_task)
        )
        cache: dict[int, dict] = {}
        out = []
        for p in picks:
            if self._stop.is_set():
                raise ExperimentError("stopped during evaluation")
            v = p["version"]
            if v not in cache:
                cache[v] = eval_policy(
                    c,
                    str(v),
                    list(self.ex.tasks),
                    seeds,
                    greedy=True,
                    contexts=self.ex.contexts,
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

    def wm_probe(self, seed: int) -> None:
        """World-model fidelity of arm 3's final world model (and of arm 1's, its start) on real
        transitions it never trained on: those the real-only arm of the same seed collected,
        next to the "nothing changes" baseline."""
        f_d, f_r = self.cell_file("dynaweb", seed), self.cell_file("real_only", seed)
        if not (f_d.exists() and f_r.exists()):
            return
        dyn = json.loads(f_d.read_text())
        if "wm_fidelity" in dyn:
            return
        from collectors.demos import to_line
        from evaluation.evaluate import eval_world_model, read_topic
        from streams.topics import Topics

        ro = json.loads(f_r.read_text())
        rc = cell_config(self.base, self.ex, ro["run_id"], "real_only", seed)
        data = self.out / f"real-s{seed}.jsonl"
        trans = read_topic(rc, Topics(rc.run_id, rc.kafka.partitions).real, 60)
        data.write_text("".join(to_line(t) + "\n" for t in trans))
        res: dict = {"data": str(data), "transitions": len(trans)}
        if trans:
            imit = json.loads(self.cell_file("imitation", seed).read_text())
            for key, cell in (("dynaweb_final", dyn), ("imitation", imit)):
                cc = cell_config(self.base, self.ex, cell["run_id"], cell["arm"], seed)
                r = eval_world_model(cc, "latest", data=str(data), split="all", limit=200)
                res[key] = {
                    k: r[k] for k in r if isinstance(r[k], int | float | dict) and k != "seconds"
                }
        dyn["wm_fidelity"] = res
        f_d.write_text(json.dumps(dyn, indent=1))
        self.say(
            f"seed {seed}: world-model fidelity on {len(trans)} held-out real transitions written"
        )

    # --- the whole study -------------------------------------------------------------
    def run(self) -> dict:
        from infra.stack import Stack

        self._check_out()
        self.say(
            f"{self.id}: {len(self.ex.seeds)} seeds x arms {', '.join(self.ex.arms)}, budget {self.ex.budget} "
            f"real steps, {self.ex.online_policy_steps} policy steps per arm after imitation; expected wall "
            f"time on 2 cores: {'a few minutes' if self.quick else 'not yet measured for 4 arms (3 arms: 48 min)'}"
        )
        t0 = time.time()
        stack = Stack(self.base)
        if self.start_stack:
            self.say("starting the stack (S3, broker, task server, Prometheus)...")
            stack.up()
        try:
            for seed in self.ex.seeds:
                todo = [
                    a for a in ARMS if a in self.ex.arms and not self.cell_file(a, seed).exists()
                ]
                if not todo:
                    continue
                demos = self.demos(seed)
                if "imitation" in todo:
                    self.run_cell("imitation", seed, demos)
                self.run_cells([a for a in todo if a in ONLINE_ARMS], seed, demos)
                if (
                    "imitation_matched" in todo
                ):  # after the online arms: its read-outs follow their points
                    self.run_cell("imitation_matched", seed, demos)
                try:
                    self.wm_probe(seed)
                except Exception as e:  # noqa: BLE001 - a diagnostic never fails the study
                    log.warning("world-model probe for seed %s failed: %s", seed, e)
        finally:
            if self.start_stack and stack.started:
                stack.down(only=stack.started)
        return self.report(time.time() - t0)

    def load_cells(self) -> list[dict]:
        return [json.loads(f.read_text()) for f in sorted(self.cells_dir.glob("*-s*.json"))]

    def frozen(self) -> dict:
        """The study's fixed configuration, as stated in the summary."""
        ex = self.ex
        return {
            "tasks": list(ex.tasks),
            "group_size": ex.group_size,
            "temperature": ex.temperature,
            "reward": REWARD,
            "imitation_steps": ex.imitation_steps,
            "online_policy_steps": ex.online_policy_steps,
            "expert_samples_per_step": expert_samples_per_step(ex),
            "batch_trajectories": ex.batch_trajectories,
            "expert_fraction": ex.expert_fraction,
            "budget": list(ex.budget),
            "seeds": list(ex.seeds),
            "arms": list(ex.arms),
            "eval_episodes_per_point": ex.eval_seeds_per_task * len(ex.tasks),
        }

    def report(self, wall_s: float) -> dict:
        """Write the artifacts and ``summary.json``; returns that summary (the ``--json`` line)."""
        cells = self.load_cells()
        prev = json.loads(self._meta_file().read_text())
        total_wall = float(prev.get("wall_s_total", 0.0)) + wall_s
        meta = {
            "experiment_id": self.id,
            "command": self.command,
            "wall_s": total_wall,
            "tasks": list(self.ex.tasks),
            "seeds": list(self.ex.seeds),
            "eval_seeds_per_task": self.ex.eval_seeds_per_task,
            "eval_seed_start": self.ex.eval_seed_start,
            "diagnostics": _diag_by_arm(cells),
            "per_task": _per_task(cells),
            "frozen": self.frozen(),
        }
        summary = write_all(cells, self.out, meta)
        prev.update(wall_s_total=round(total_wall, 1), command=self.command)
        self._meta_file().write_text(json.dumps(prev, indent=1))
        out = {
            "arms": summary["arms"],
            "experiment_id": self.id,
            "quick": self.quick,
            "config": meta["frozen"],
            "out": str(self.out),
            "wall_s": round(total_wall, 1),
            "cells": len(cells),
            "rows": summary["rows"],
            "headline": summary["headline"],
            "paired": summary["paired"],
            "artifacts": {
                k: str(self.out / k)
                for k in ("results.csv", "success_vs_real.png", "results.md", "summary.json")
            },
        }
        (self.out / "summary.json").write_text(json.dumps(out, indent=1, default=str) + "\n")
        return out


# per-cell diagnostics averaged over seeds: the trainer's own counters (policy steps, policy samples per
# source), the stream's and dream generator's counters, and what the run's topics held (``topic_``)
DIAG_KEYS = (
    "trainer_policy_steps",
    "trainer_samples_expert",
    "trainer_samples_real",
    "trainer_samples_dream",
    "dream_steps",
    "wm_invalid_outputs",
    "stale_dropped",
    "topic_live_episodes",
    "topic_live_success",
    "topic_dream_episodes",
    "topic_dream_success",
)


def _mean(xs: list) -> float | None:
    xs = [x for x in xs if isinstance(x, int | float)]
    return round(sum(xs) / len(xs), 3) if xs else None


def _diag_by_arm(cells: list[dict]) -> dict:
    """Per arm, means over seeds of what explains a result: updates, live and dreamed success during
    training, world-model repairs, stale drops, the world model's fidelity on held-out real transitions
    next to the "nothing changes" baseline; and, from the trainer's counters pooled over seeds, the
    GSPO groups that reached the loss per source and the share with a nonzero advantage."""
    out: dict = {}
    for arm in ARMS:
        cs = [c for c in cells if c["arm"] == arm]
        if not cs:
            continue
        d: dict = {
            "train_s": _mean([c["train_s"] for c in cs]),
            "eval_s": _mean([c["eval_s"] for c in cs]),
            "live_steps": _mean([c["live_steps"] for c in cs]),
            "versions": _mean([len(c["history"]) for c in cs]),
        }
        for k in DIAG_KEYS:
            v = _mean([c.get("diagnostics", {}).get(k) for c in cs])
            if v is not None:
                d[k] = v
        pooled = pooled_gspo([c.get("diagnostics", {}).get("gspo") or {} for c in cs])
        for name, src in (("live", "real"), ("dream", "dream")):
            g = pooled.get(src, {})
            if g.get("groups"):
                d[f"trainer_{name}_groups"] = round(g["groups"] / len(cs), 3)
                d[f"trainer_{name}_nonzero_adv_share"] = round(
                    g.get("groups_nonzero", 0.0) / g["groups"], 4
                )
            if g.get("stale_dropped"):
                d[f"trainer_{name}_stale_dropped"] = round(g["stale_dropped"] / len(cs), 3)
            if g.get("ungrouped"):
                d[f"trainer_{name}_ungrouped"] = round(g["ungrouped"] / len(cs), 3)
        fids = [
            c["wm_fidelity"]["dynaweb_final"]
            for c in cs
            if c.get("wm_fidelity", {}).get("dynaweb_final")
        ]
        for k in (
            "exact_match",
            "change_f1",
            "baseline_exact_match",
            "baseline_change_f1",
            "ok_rate",
        ):
            v = _mean([f.get(k) for f in fids])
            if v is not None:
                d[f"wm_{k}"] = v
        out[arm] = d
    return out


def _per_task(cells: list[dict]) -> dict:
    """arm -> task -> mean over seeds of the success at the arm's last point."""
    out: dict = {}
    for arm in ARMS:
        finals = [c["points"][-1].get("per_task", {}) for c in cells if c["arm"] == arm]
        tasks = sorted({t for f in finals for t in f})
        if tasks:
            out[arm] = {t: _mean([f.get(t) for f in finals]) for t in tasks}
    return out


def main(args, cfg: Config) -> int:
    if args.study != "sample-efficiency":
        raise ValueError(f"unknown experiment {args.study!r}")
    import signal

    def on_term(*_):  # SIGTERM unwinds like Ctrl-C, so every cell stops its processes
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    exp = SampleEfficiency(cfg, Path(args.out), quick=args.quick, start_stack=not args.no_stack)
    res = exp.run()
    print((Path(args.out) / "results.md").read_text())
    if args.json:
        print(json.dumps(res, default=str))
    return 0
