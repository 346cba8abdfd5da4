"""``dynaweb experiment sample-efficiency``: does training by imagination save real interactions?

Five arms, each run through the real system (the broker, the stream worker, the
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
5. ``dynaweb_dream_only``: as ``dynaweb``, but the policy learns from dreams and demonstrations
   only (the paper's setting): the same real groups are collected and train the world model,
   and the stream worker keeps them out of policy batches (``stream.policy_sources=['dream']``).

Arms 2-5 take exactly ``online_policy_steps`` policy optimizer steps (``trainer.max_steps``,
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

This module runs the study (demonstrations, the cells of every seed, the world-model probe, the
report); the pieces, modules of this package: ``arm_names`` (the arms), ``arms`` (the configuration
of every arm and the read-out points), ``cell`` (one cell), ``diagnostics`` (what is read from the
trainer's counters and the topics), ``report`` (the figures) and ``artifacts`` (the files written
from them).  The embedded stack, when the study starts it, comes from the ``stack_factory`` the
command passes in (``infra.stack.Stack``).
"""

from __future__ import annotations

import json
import logging
import shlex
import sys
import time
import uuid
from pathlib import Path

from core.config import Config
from core.supervise import Supervisor
from evaluation.operations import StackFactory
from evaluation.studies.sample_efficiency.arm_names import ARMS, DREAM_ARMS, ONLINE_ARMS
from evaluation.studies.sample_efficiency.arms import (
    REWARD,
    bc_temperature,
    cell_config,
    cell_settings,
    experiment_id,
    resolve_experiment,
)
from evaluation.studies.sample_efficiency.artifacts import write_all
from evaluation.studies.sample_efficiency.cell import CellRun, ExperimentError, check_child_crashes
from evaluation.studies.sample_efficiency.config import (
    SampleEfficiencyConfig,
    expert_samples_per_step,
)
from evaluation.studies.sample_efficiency.diagnostics import diag_by_arm, per_task
from evaluation.studies.sample_efficiency.protocol import REPO as PROTOCOL_REPO
from evaluation.studies.sample_efficiency.protocol import protocol, tasks_apart

log = logging.getLogger(__name__)
# how the world model's fidelity is held out: the probe scores real transitions of seeds the
# arm never collected, and the corpus is of other tasks (experiment.corpus_tasks)
WM_SPLIT = "task_seed"


class SampleEfficiency:
    def __init__(
        self,
        cfg: SampleEfficiencyConfig,
        out: Path,
        quick: bool = False,
        start_stack: bool = True,
        echo: bool = True,
        command: str = "",
        stack_factory: StackFactory | None = None,
    ):
        if start_stack and stack_factory is None:
            raise ValueError("starting the stack needs a stack_factory (infra.stack.Stack)")
        self.base: Config = cfg.runtime()  # what the cells' components get: no study section
        self.ex = resolve_experiment(cfg, quick)
        self.quick = quick
        self.out = Path(out)
        self.start_stack = start_stack
        self.stack_factory = stack_factory
        self.echo = echo
        self.command = command or "dynaweb " + " ".join(shlex.quote(a) for a in sys.argv[1:])
        self.id = experiment_id(self.ex)
        self.cells_dir = self.out / "cells"
        import threading

        self._stop = threading.Event()
        self.wm_pre: dict | None = None  # the DynaWeb arms' pretrained world model (wm_corpus)
        self.prereg: dict | None = None  # the commit and statement (protocol.preregistration)
        self.repo = PROTOCOL_REPO  # the checkout whose commit the study records

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
        old = json.loads(f.read_text()) if f.exists() else None
        self.prereg = self._preregistration(old)
        meta["preregistration"] = self.prereg
        meta["statement_commit"] = (self.prereg or {}).get("statement_commit")
        if old is not None:
            # (an id from before seeds and arms left the hash: the same cells if the rest agrees)
            if old.get("experiment_id") != self.id and (
                cell_settings(old.get("config") or {}) != cell_settings(self.ex)
                or old.get("quick") != self.quick
            ):
                raise ValueError(
                    f"{self.out} holds experiment {old.get('experiment_id')} with another "
                    f"configuration; use a new --out (or delete it) to run {self.id}"
                )
            if old.get("experiment_id") != self.id:
                old["former_experiment_id"] = old.get("experiment_id")
            meta = {**old, **meta}  # more seeds or arms: the same cells, the study's list grows
        f.write_text(json.dumps(meta, indent=1))

    def _preregistration(self, old: dict | None) -> dict | None:
        """A full study: the checkout is clean, the statement committed, and a resumed study
        runs the code it started with (``protocol``); the record kept in ``experiment.json``
        (the first run's, with every commit a sitting ran from in ``commits``).  ``--quick``
        records the commit when there is one and checks nothing."""
        from evaluation.studies.sample_efficiency import protocol as p

        if self.quick:
            try:
                return {"commit": p.git(self.repo, "rev-parse", "HEAD"), "checked": False}
            except p.PreregistrationError:
                return None
        now = p.preregistration(self.ex.statement, self.out, self.repo)
        first = (old or {}).get("preregistration") or {}
        if first.get("checked", True) and first.get("commit"):
            p.check_resume(first, now, self.out, self.repo)
        rec = {**now, **first} if first.get("commit") else dict(now)
        rec["checked"] = True
        rec["commits"] = list(dict.fromkeys([*first.get("commits", []), now["commit"]]))
        self.say(
            f"stated in {rec['statement']} at {rec['statement_commit'][:10]}; running from "
            f"{now['commit'][:10]}"
        )
        return rec

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
                check_child_crashes(sup)
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

    # --- one cell ----------------------------------------------------------------------
    def run_cell(self, arm: str, seed: int, demos: Path) -> dict:
        """Run one (arm, seed) cell (``evaluation.studies.sample_efficiency.cell``) and write its record."""
        demo_steps = sum(1 for line in demos.read_text().splitlines() if line.strip())
        run_id = self._new_run_id(arm, seed)
        init = ""
        if arm != "imitation":
            imit = json.loads(self.cell_file("imitation", seed).read_text())
            init = f"{imit['run_id']}:{imit['points'][-1]['version']}"
        wm_init = self.wm_pre["dir"] if self.wm_pre and arm in DREAM_ARMS else ""
        c = cell_config(self.base, self.ex, run_id, arm, seed, init_from=init, wm_init=wm_init)
        online = (
            [
                json.loads(self.cell_file(a, seed).read_text())["points"]
                for a in ONLINE_ARMS
                if self.cell_file(a, seed).exists()
            ]
            if arm == "imitation_matched"
            else []
        )
        cell = CellRun(self.ex, c, arm, seed, demos, demo_steps, self._stop, self.say, online)
        res = cell.run()
        res["commit"] = (self.prereg or {}).get("commit")
        if wm_init:  # the corpus it was pretrained on: real interactions charged to this arm
            res["offline_real_steps"] = int(self.wm_pre["real_transitions"])
            res["wm_pretrained"] = {k: v for k, v in self.wm_pre.items() if k != "settings"}
        self.cell_file(arm, seed).write_text(json.dumps(res, indent=1))
        self.say(
            f"{arm} seed {seed}: "
            + ", ".join(
                f"{p['policy_steps']} policy / {p['real_steps']} real steps -> "
                f"{100 * p['success']:.0f}%"
                for p in res["points"]
            )
            + f" ({time.time() - cell.t0:.0f}s)"
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

    def wm_probe(self, seed: int) -> None:
        """World-model fidelity of each dream arm's final world model (and of arm 1's, its start)
        on at least 1,000 real transitions of (task, seed) pairs it never trained on, whole
        episodes with every terminal step (``wm_heldout.probe_data``: the real-only arm's of
        seeds this arm never collected, then the corpus when it was not trained on), next to the
        "nothing changes" baseline."""
        f_r = self.cell_file("real_only", seed)
        if not f_r.exists():
            return
        from collectors.demos import to_line
        from evaluation.eval.sources import read_jsonl, read_topic
        from evaluation.eval.world_model import eval_world_model
        from evaluation.studies.sample_efficiency.wm_heldout import PROBE_LEAST, probe_data
        from streams.topics import Topics

        def real_of(cell: dict) -> list:
            cc = cell_config(self.base, self.ex, cell["run_id"], cell["arm"], seed)
            return read_topic(cc, Topics(cc.run_id, cc.kafka.partitions).real, 60)

        real_only = None
        for arm in DREAM_ARMS:
            f_d = self.cell_file(arm, seed)
            if not f_d.exists():
                continue
            dyn = json.loads(f_d.read_text())
            if "wm_fidelity" in dyn:
                continue
            if real_only is None:
                real_only = real_of(json.loads(f_r.read_text()))
            # what the probed world models trained on: this arm's own real transitions and the
            # demonstrations (arm 1's); the corpus when pretrained (wm_heldout.trained_on)
            collected = real_of(dyn) + read_jsonl(str(self.out / f"demos-s{seed}.jsonl"))
            least = 1 if self.quick else PROBE_LEAST  # (--quick checks the plumbing)
            trans, rec = probe_data(self.ex, real_only, collected, bool(self.wm_pre), least)
            data = self.out / f"wm-probe-{arm}-s{seed}.jsonl"
            data.write_text("".join(to_line(t) + "\n" for t in trans))
            res: dict = {"data": str(data), **rec}
            imit = json.loads(self.cell_file("imitation", seed).read_text())
            for key, cell in (("dynaweb_final", dyn), ("imitation", imit)):
                cc = cell_config(self.base, self.ex, cell["run_id"], cell["arm"], seed)
                r = eval_world_model(cc, "latest", data=str(data), split="all")
                res[key] = {
                    k: r[k] for k in r if isinstance(r[k], int | float | dict) and k != "seconds"
                }
            dyn["wm_fidelity"] = res  # "dynaweb_final": this arm's final world model
            f_d.write_text(json.dumps(dyn, indent=1))
            self.say(
                f"{arm} seed {seed}: world-model fidelity on {len(trans)} real transitions of "
                f"seeds it never collected ({rec['terminal_steps']} terminal steps) written"
            )

    def replay_probe(self, seed: int) -> None:
        """The replay check (``evaluation.eval.replay``) of each dream arm's dreams: up to
        ``experiment.replay_rollouts`` of them replayed in the live browser, the AUROC of the
        dreamed reward against real success kept in the cell (``replay``)."""
        from evaluation.eval.replay import check_run

        for arm in DREAM_ARMS:
            f = self.cell_file(arm, seed)
            if not f.exists() or self.ex.replay_rollouts <= 0:
                continue
            cell = json.loads(f.read_text())
            if "replay" in cell:
                continue
            cc = cell_config(self.base, self.ex, cell["run_id"], arm, seed)
            try:
                res = check_run(cc, self.ex.replay_rollouts)
            except ValueError as e:  # no complete dream from a first page: said, not fatal
                res = {"dream_reward_auroc": None, "n": 0, "error": str(e)}
            cell["replay"] = {k: v for k, v in res.items() if k != "by_policy_version"}
            f.write_text(json.dumps(cell, indent=1))
            self.say(
                f"{arm} seed {seed}: {res.get('n', 0)} dreams replayed live, AUROC "
                f"{res.get('dream_reward_auroc')}"
            )

    def release_checkpoints(self, seed: int) -> int:
        """Once a seed is done: every run of its cells keeps only its LATEST checkpoints (what
        each point read out is in the cell's record); returns the versions removed."""
        from core.s3 import make_client
        from models.checkpoints.store import KINDS, CheckpointStore

        client, removed = make_client(self.base), 0
        for arm in ARMS:
            f = self.cell_file(arm, seed)
            if f.exists():
                store = CheckpointStore(
                    client, self.base.s3.bucket, json.loads(f.read_text())["run_id"]
                )
                removed += sum(len(store.prune(kind, keep=1)) for kind in KINDS)
        self.say(
            f"seed {seed}: {removed} checkpoint versions released (experiment.keep_checkpoints)"
        )
        return removed

    # --- the whole study -------------------------------------------------------------
    def run(self) -> dict:
        self._check_out()
        self.say(
            f"{self.id}: {len(self.ex.seeds)} seeds x arms {', '.join(self.ex.arms)}, budget {self.ex.budget} "
            f"real steps, {self.ex.online_policy_steps} policy steps per arm after imitation; wall time on "
            f"2 cores: {'a few minutes' if self.quick else 'see docs/experiment.md (23 min for the defaults)'}"
        )
        t0 = time.time()
        if any(a in DREAM_ARMS for a in self.ex.arms):
            from evaluation.studies.sample_efficiency.wm import pretrain

            self.wm_pre = pretrain(self.ex, self.base, self.out, self.quick, self.say)
        stack = self.stack_factory(self.base) if self.start_stack else None
        if stack is not None:
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
                for probe in (self.wm_probe, self.replay_probe):
                    try:
                        probe(seed)
                    except Exception as e:  # noqa: BLE001 - a diagnostic never fails the study
                        log.warning("%s for seed %s failed: %s", probe.__name__, seed, e)
                if not self.ex.keep_checkpoints:
                    self.release_checkpoints(seed)
        finally:
            if stack is not None and stack.started:
                stack.down(only=stack.started)
        return self.report(time.time() - t0)

    def load_cells(self) -> list[dict]:
        """The finished cells of this study's arms and seeds (a report with fewer seeds, e.g. a
        partial one, pools only those)."""
        return [
            json.loads(f.read_text())
            for a in ARMS
            if a in self.ex.arms
            for seed in self.ex.seeds
            if (f := self.cell_file(a, seed)).exists()
        ]

    def frozen(self) -> dict:
        """The study's fixed configuration, as stated in the summary."""
        ex = self.ex
        return {
            "tasks": list(ex.tasks),
            "group_size": ex.group_size,
            "temperature": ex.temperature,
            "bc_temperature": bc_temperature(ex),
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
            "instruction_match": ex.instruction_match,
            "policy_pointer": ex.policy_pointer,
            "corpus_tasks": list(ex.corpus_tasks) or None,
            "wm_corpus": ex.wm_corpus or None,
            "wm_pretrain_steps": ex.wm_pretrain_steps if ex.wm_corpus else None,
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
            "diagnostics": diag_by_arm(cells),
            "per_task": per_task(cells),
            "apart_tasks": list(self.ex.apart_tasks),
            "frozen": self.frozen(),
            "world_model_pretrained": self.wm_pre,
        }
        summary = write_all(cells, self.out, meta)
        prev.update(wall_s_total=round(total_wall, 1), command=self.command)
        self._meta_file().write_text(json.dumps(prev, indent=1))
        out = {
            "protocol": protocol(self.ex, self.prereg, WM_SPLIT),
            "arms": summary["arms"],
            "experiment_id": self.id,
            "quick": self.quick,
            "config": meta["frozen"],
            "out": str(self.out),
            "wall_s": round(total_wall, 1),
            "cells": len(cells),
            "rows": summary["rows"],
            "headline": summary["headline"],
            "headline_online": summary["headline_online"],
            # with a corpus of other tasks, the online real steps on the evaluated tasks are the
            # fair count (the method's setting); every real step, corpus included, is beside it
            "headline_accounting": "online" if self.ex.corpus_tasks else "every",
            "world_model_pretrained": self.wm_pre,
            "paired": summary["paired"],
            "per_task_apart": tasks_apart(meta["per_task"], list(self.ex.apart_tasks)),
            "artifacts": {
                k: str(self.out / k)
                for k in ("results.csv", "success_vs_real.png", "results.md", "summary.json")
            },
        }
        (self.out / "summary.json").write_text(json.dumps(out, indent=1, default=str) + "\n")
        return out


def main(args, cfg: SampleEfficiencyConfig, stack_factory: StackFactory | None = None) -> int:
    if args.study != "sample-efficiency":
        raise ValueError(f"unknown experiment {args.study!r}")
    import signal

    def on_term(*_):  # SIGTERM unwinds like Ctrl-C, so every cell stops its processes
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    exp = SampleEfficiency(
        cfg,
        Path(args.out),
        quick=args.quick,
        start_stack=not args.no_stack,
        stack_factory=stack_factory,
    )
    res = exp.run()
    print((Path(args.out) / "results.md").read_text())
    if args.json:
        print(json.dumps(res, default=str))
    return 0
