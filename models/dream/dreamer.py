"""The dream generator: the current policy rolled out inside the world model.

It follows ``LATEST`` in S3 for both model kinds: on every checkpoint
announcement (``streams.checkpoints.CheckpointWatcher``), at start, and when
``LATEST`` re-read every ``s3.latest_poll_s`` changed (an announcement may be
lost) it downloads the new version, verifies every sha256 and swaps the models in place
between two rounds without restarting (``models.checkpoints.reader.ModelSlot``); a
checkpoint that fails verification is refused and the loaded weights stay.
Start states are real first observations (step 0) read from the real and
expert topics.
Dreamed transitions carry both model versions, the group id (one GSPO group
per start state) and the behaviour log-probabilities.  Back-pressure messages
from the stream worker scale the dream rate; with ``dream.pace`` a round is dreamed only while
fewer than a window of this generator's dreamed episodes are in flight ahead of the trainer's
consumption, which the trainer's progress message reports (``models/dream/pacing.py``).

``Dreamer`` takes its parts (``models.parts``: the model slots, a publisher, the consumer factory,
the announcement watcher's factory) and its config sections, and opens nothing in its
constructor; ``models.dream.run.build_dreamer`` makes the parts from the config.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import torch
from kafka import TopicPartition

from core.config import DreamConfig, ModelConfig
from core.process import trim_heap
from core.spaces import Observation
from models import metrics as M
from models.checkpoints.reader import Prefetcher, ReloadClock
from models.component import close_component
from models.dream.groups import keep_varied_capped, observe_reward_signal
from models.dream.pacing import CreditWindow
from models.parts import AnnouncementWatcher, ConsumerFactory, Publisher, Slot
from streams import records
from streams.topics import Topics

# what the watcher's factory is called with: the generator's announcement handler
WatcherFactory = Callable[[Callable[[records.CheckpointAnnouncement], None]], AnnouncementWatcher]

log = logging.getLogger(__name__)


@dataclass
class StartState:
    obs: Observation
    task: str
    seed: int
    step: int = 0  # the real step whose page it is


HOLD_WM_LOAD_S = 5.0  # the longest a world model's load waits for a new policy's first round


class Dreamer:
    credit: CreditWindow | None = None  # dream.pace's window (None: off)
    pace_reason = ""  # why the last round waited for the trainer ("": it did not)
    trusted_logged: list | None = None  # the tasks the trust gate admitted, as last logged
    _pace_logged = 0.0

    def __init__(
        self,
        run: str,
        producer_id: str,
        dream: DreamConfig,
        model_cfg: ModelConfig,
        topics: Topics,
        slots: dict[str, Slot],
        pub: Publisher,
        open_consumer: ConsumerFactory,
        watch: WatcherFactory,
        work: Path,
        credit: CreditWindow | None = None,
        stop: threading.Event | None = None,
    ):
        """``dream``: the ``dream`` section; ``model_cfg``: the policy runner's model settings;
        ``slots``: the loaded ``policy`` and ``world_model`` (their downloads under ``work``,
        removed by ``close``); ``open_consumer``: opens the consumer of the control, real and
        expert topics in ``setup``; ``watch``: makes the announcement watcher, given the
        generator's handler; ``credit``: ``dream.pace``'s window (None: off,
        ``models.dream.run.pace_window``)."""
        self.dream, self.model_cfg = dream, model_cfg
        self.run = run
        self.stop = stop or threading.Event()
        self.started_at = time.time()
        self.producer_id = f"{producer_id}@{int(self.started_at)}"
        self.topics = topics
        self.work = work
        self.slots = slots
        self.pub = pub
        self.open_consumer = open_consumer
        self.loader = ThreadPoolExecutor(len(self.slots), thread_name_prefix="dream-load")
        self.starts: deque[StartState] = deque(maxlen=dream.start_pool)
        self.rate_factor = 1.0
        self._factor_logged = 0.0
        self.iteration_t0 = 0.0  # when the loop's current iteration began (back-pressure pacing)
        self.steps_published = 0
        # this sampler's own random streams (start states, actions), never rewound by a hot reload
        self.rng = random.Random(f"{run}|{self.producer_id}")
        from models.policy.runner import sampler_generator

        self.generator = sampler_generator(run, self.producer_id)
        self._runners: tuple | None = None
        self.consumer = None
        # new weights are downloaded and loaded on an announcement while the round goes on
        # (``Prefetcher``).  A new policy sets ``_announced`` as soon as it is ready: the round in
        # flight is given up and poll() puts it in use (groups are stamped with the policy's
        # version; its staleness is what the trainer bounds).  A new world model does not give a
        # round up: it is put in use at the next round's start (``_prefetched``), so the first
        # group of a new policy never waits for the world model's download
        self._announced = threading.Event()
        self._prefetched = threading.Event()
        self.prefetcher = Prefetcher(
            list(self.slots.values()),
            self._prefetched.set,
            self.stop,
            pool=self.loader,
            name="dream-prefetch",
            on_slot_ready=self._slot_ready,
        )
        # a new policy's first round runs before the world model that came with it is loaded
        # (its download goes on): the load and the collection before it would hold the
        # interpreter lock against the round's decode loop; cleared on a policy announcement, set
        # when a round with that policy (or a newer one) ends, waited for at most HOLD_WM_LOAD_S
        self._round_done = threading.Event()
        self._round_done.set()
        self._awaited_policy = -1  # the newest policy version announced
        self.slots["world_model"].hold_load = self._hold_world_model_load
        self.abandoned_last = False  # the last round was given up for a new checkpoint
        self.first_round = True  # no round has run with the loaded weights yet
        self.dropped_streak = 0  # uniform groups dropped since the last published group
        self.gate_reason = ""  # the last gate decision's reason (logged when it changes)
        self.credit = credit
        self.reload_clock = ReloadClock(self.run, "dream")
        self.watcher = watch(self._on_announcement)

    def _on_announcement(self, rec: records.CheckpointAnnouncement) -> None:
        slot = self.slots.get(rec.kind)
        if rec.kind == "policy":
            self.reload_clock.announced(rec.version)
            v = int(rec.version)
            if slot.version is not None and v > max(self._awaited_policy, slot.version):
                self._awaited_policy = v  # not dreamed with yet: hold the world model's load
                self._round_done.clear()
        if slot is not None and slot.known(rec.version):
            return  # loaded already (both kinds are read at the first of a pair's announcements)
        self.prefetcher.want()

    def _hold_world_model_load(self) -> None:
        """Wait (at most ``HOLD_WM_LOAD_S``) for the round of a newly announced policy to end."""
        deadline = time.time() + HOLD_WM_LOAD_S
        while not self.stop.is_set() and time.time() < deadline:
            if self._round_done.wait(0.05):
                return

    def _slot_ready(self, slot: Slot) -> None:
        if slot.kind == "policy":
            self._announced.set()

    def install_ready(self) -> bool:
        """Put in use what the prefetcher has ready (never waits for a download in flight);
        True if anything was installed."""
        got = [slot.install() for slot in self.slots.values()]
        if any(got):
            self._runners = None
            self.first_round = True
        return any(got)

    def setup(self) -> None:
        self.consumer = self.open_consumer(max_poll_records=500)
        tps = []
        for t in (self.topics.control, self.topics.real, self.topics.expert):
            parts = self.consumer.partitions_for_topic(t) or {0}
            tps += [TopicPartition(t, p) for p in sorted(parts)]
        self.consumer.assign(tps)
        self.consumer.seek_to_beginning(*tps)
        self.watcher.start()
        self.refresh_models()
        self.prefetcher.start()

    def refresh_models(self, poll: bool = False) -> None:
        """Re-read LATEST of both kinds (``poll``: only those whose poll is due, S3 errors
        tolerated: ``ModelSlot.poll``)."""
        # both kinds at once: their downloads and loads overlap (the reload's latency to first use)
        results = list(
            self.loader.map(lambda s: s.poll() if poll else s.refresh(), self.slots.values())
        )
        if any(results):
            self._runners = None
            self.first_round = True

    @property
    def ready(self) -> bool:
        return all(s.model is not None for s in self.slots.values())

    def runners(self) -> tuple:
        if self._runners is None:
            from models.policy.runner import PolicyRunner
            from models.world_model.runner import WorldModelRunner

            p, w = self.slots["policy"], self.slots["world_model"]
            pr = PolicyRunner(p.model, p.tokenizer, self.model_cfg, generator=self.generator)
            pr.policy_version = p.version

            M.DREAM_HEADS_TRAINED.labels(self.run).set(float(w.model.heads_trained()))
            self._runners = (pr, WorldModelRunner(w.model, w.tokenizer, self.dream))
        return self._runners

    def poll(self, timeout_ms: int) -> None:
        """Back-pressure and start states from the consumer; reload on an announcement seen since
        the last poll (any kind: both slots re-read LATEST), else when LATEST's poll is due."""
        for _tp, msgs in self.consumer.poll(timeout_ms=timeout_ms).items():
            for m in msgs:
                if m.value is None:
                    continue
                try:
                    rec = records.decode(m.value)
                except records.RecordError:
                    continue  # the stream worker dead-letters bad transitions; nothing to do here
                if isinstance(rec, records.Control) and rec.kind == "backpressure":
                    self.set_rate_factor(float(rec.value), rec.info.get("lag"))
                elif isinstance(rec, records.Control) and rec.kind == "consumed":
                    self.on_consumed(rec)
                elif isinstance(rec, records.Transition) and (
                    rec.step == 0 or self.dream.start_from == "any"
                ):
                    self.starts.append(
                        StartState(Observation.from_dict(rec.obs), rec.task, rec.seed, rec.step)
                    )
        M.DREAM_START_STATES.labels(self.run).set(len(self.starts))
        if self._announced.is_set() or self._prefetched.is_set():
            self._announced.clear()
            self._prefetched.clear()
            t0 = time.time()
            if not self.install_ready():
                self.refresh_models()  # nothing prefetched (a failed prefetch): read LATEST here
            if self.first_round:  # a new version: the reload's phases, for its latency to first use
                log.info(
                    "reload: announcement seen %.2fs before the reload began, reload %.2fs",
                    t0 - (self.reload_clock.last_seen() or t0),
                    time.time() - t0,
                )
        elif any(slot.poll_due() for slot in self.slots.values()):
            self.refresh_models(poll=True)  # a lost announcement delays a reload, never prevents it

    def set_rate_factor(self, value: float, lag: object = None) -> None:
        factor, now = max(0.01, min(1.0, value)), time.time()
        if factor != self.rate_factor:
            # logged when throttling starts or ends, and at most every 5 s in between (the worker
            # sends a new factor whenever its lag moves by a tenth)
            if (factor < 1.0) != (self.rate_factor < 1.0) or now - self._factor_logged >= 5.0:
                log.info(
                    "back-pressure: rate factor %.3f -> %.3f (lag %s)",
                    self.rate_factor,
                    factor,
                    lag,
                )
                self._factor_logged = now
        self.rate_factor = factor
        M.DREAM_RATE_FACTOR.labels(self.run).set(factor)

    def dream_once(self) -> int:
        from models.dream.env import dream_rollouts

        cfg = self.dream
        # the first round with new weights dreams one group: its group is out in half the time
        # of a full round (the reload's latency to first use), the next rounds are full
        n_start = 1 if self.first_round else max(1, cfg.batch // cfg.group_size)
        if self.credit is not None:  # dream.pace: no more groups than the window has room for
            n_start = self.credit.groups_allowed(n_start, cfg.group_size)
        pool = self.trusted_starts()
        if not pool:
            return 0
        starts = [self.rng.choice(pool) for _ in range(n_start)]
        for s in starts:
            M.DREAM_STARTS.labels(self.run, "first" if s.step == 0 else "mid").inc()
        pr, wr = self.runners()
        pv, wv = self.slots["policy"].version, self.slots["world_model"].version
        t0 = time.time()
        # a checkpoint announced mid-round: give the round up and dream with it at once (the
        # round after an abandoned one always completes, so frequent checkpoints cannot starve)
        abort = None if self.abandoned_last else self._announced.is_set
        with torch.no_grad():
            rollouts = dream_rollouts(
                pr,
                wr,
                [s.obs for s in starts],
                cfg.group_size,
                cfg.horizon,
                temperature=cfg.temperature,
                abort=abort,
                max_disagreement=cfg.max_disagreement,
            )
        self.abandoned_last = not rollouts
        if not rollouts:
            M.DREAM_ABANDONED.labels(self.run).inc()
            return 0
        self._observe_dreamed(rollouts, starts)  # every group dreamed, published or not
        self.first_round = False
        if pv is not None and pv >= self._awaited_policy:
            self._round_done.set()  # the new policy's first round is out: the world model may load
        if cfg.drop_uniform_groups:
            rollouts, dropped, self.dropped_streak, forced = keep_varied_capped(
                rollouts, self.dropped_streak, cfg.max_dropped_per_published
            )
            if dropped:
                M.DREAM_GROUPS_DROPPED.labels(self.run, "uniform").inc(dropped)
            if forced:
                M.DREAM_UNIFORM_PUBLISHED.labels(self.run).inc()
        if self.credit is not None and rollouts:
            self.credit.on_produced(int(pv or 0), len(rollouts), time.time())
        n = 0
        for ro in rollouts:
            start = starts[ro.start_index]
            ep = records.new_id()
            for i, st in enumerate(ro.steps):
                last = i == len(ro.steps) - 1
                rec = records.Transition(
                    run_id=self.run,
                    episode_id=ep,
                    step=i,
                    task=start.task,
                    seed=start.seed,
                    source="dream",
                    policy_version=pv,
                    world_model_version=wv,
                    obs=st["obs"].to_dict(),
                    action=st["action"],
                    next_obs=st["next_obs"].to_dict(),
                    reward=float(st["reward"]) if last else 0.0,
                    done=bool(st["done"]) and last,
                    truncated=last and not st["done"],
                    created_at=float(st.get("at") or time.time()),  # when the step was dreamed
                    producer_id=self.producer_id,
                    group_id=ro.group_id,
                    behaviour_logprob=float(st["logprob"]),
                    action_tokens=int(st["ntokens"]),
                    candidates_hash=str(st.get("candidates_hash") or ""),
                    info={
                        "start_step": start.step,  # the real step the dream started from
                        "wm_ok": bool(st.get("ok", True)),
                        "temperature": float(st.get("temperature") or 1.0),
                        **(
                            {}
                            if st.get("disagreement") is None
                            else {"disagreement": round(float(st["disagreement"]), 4)}
                        ),
                        **(
                            {}
                            if st.get("p_success") is None
                            else {"p_success": round(float(st["p_success"]), 4)}
                        ),
                    },
                )
                self.pub.send(self.topics.dream, rec, key=ro.group_id)
                n += 1
        M.DREAM_STEPS.labels(self.run).inc(n)
        if n:
            self._used(pv, t0, min(ro.steps[0].get("at") or t0 for ro in rollouts if ro.steps))
        M.DREAM_ROLLOUTS.labels(self.run).inc(len(rollouts))
        self.steps_published += n
        self._stretch(n, t0)
        return n

    def _observe_dreamed(self, rollouts: list, starts: list[StartState]) -> None:
        """The round's dreamed rollouts, published or not: their success (overall and per task),
        world-model repairs, lengths and the reward signal (``observe_reward_signal``)."""
        observe_reward_signal(self.run, rollouts)
        per_task: dict[str, list[int]] = {}
        for ro in rollouts:
            ok = int(ro.steps[-1]["reward"] > 0)
            by_task = per_task.setdefault(starts[ro.start_index].task, [0, 0])
            by_task[0] += ok
            by_task[1] += 1
            bad = sum(1 for st in ro.steps if not st.get("ok", True))
            if bad:
                M.DREAM_WM_INVALID.labels(self.run, "repaired_or_rejected").inc(bad)
            M.DREAM_ROLLOUT_LEN.labels(self.run).observe(len(ro.steps))
        M.DREAM_SUCCESS.labels(self.run).set(sum(k for k, _ in per_task.values()) / len(rollouts))
        for task, (k, total) in per_task.items():
            M.DREAM_TASK_SUCCESS.labels(self.run, task or "unknown").set(k / total)

    def _stretch(self, n: int, t0: float) -> None:
        """Back-pressure: stretch this iteration so the rate scales with the factor (the whole
        iteration's work, the consumer's poll, the round and publishing, not only the round: the
        rate scales however the loop's time is split)."""
        cfg = self.dream
        elapsed = time.time() - (self.iteration_t0 or t0)
        limit = cfg.rate_limit_per_s * self.rate_factor if cfg.rate_limit_per_s else 0.0
        if self.rate_factor < 1.0 or limit:
            target = n / limit if limit else elapsed / self.rate_factor
            self._pace(time.time() + max(0.0, target - elapsed))

    def _used(self, pv: int, round_t0: float, first_step_at: float) -> None:
        """The round's policy version was used: at its first dreamed step (as a collector's
        version is used at its first action), which the reload clock times."""
        late = self.reload_clock.used(pv, at=first_step_at)
        if late is not None:
            log.info(
                "policy v%s first dreamed %.2fs after its announcement; its groups were "
                "published %.2fs after it (round %.2fs)",
                pv,
                late,
                late + time.time() - first_step_at,
                time.time() - round_t0,
            )

    def _pace(self, until: float) -> None:
        """Wait until ``until``, or less: a stop or a checkpoint's announcement ends the wait (a
        reload is never held back by back-pressure pacing)."""
        while not self.stop.is_set() and not self._announced.is_set():
            left = until - time.time()
            if left <= 0:
                return
            self.stop.wait(min(left, 0.1))

    def gate_open(self) -> bool:
        """Whether the loaded world model may be dreamed with (``models/dream/gate.py``)."""
        if not self.dream.wm_gate:
            return True
        from models.dream.gate import dream_gate_decision

        d = self.dream
        ok, why = dream_gate_decision(
            self.slots["world_model"].extra.get("wm_gate"), d.wm_gate_margin, d.wm_gate_min_samples
        )
        if why != self.gate_reason:
            log.info(
                "world model v%s %s dreams: %s",
                self.slots["world_model"].version,
                "opens" if ok else "holds back",
                why,
            )
            self.gate_reason = why
        return ok

    def trusted_starts(self) -> list[StartState]:
        """The start states it may dream from: all of them, or with ``dream.trust_gate`` those of
        the tasks the loaded world model's manifest trusts (``models/dream/trust.py``); each
        task's admission is exported (``dynaweb_dream_task_trusted``)."""
        if not self.dream.trust_gate:
            return list(self.starts)
        from models.dream.trust import trusted_tasks

        d = self.dream
        ok = trusted_tasks(
            self.slots["world_model"].extra.get("task_trust"),
            d.trust_min_accuracy,
            d.trust_max_gap,
            d.trust_min_episodes,
        )
        tasks = {s.task for s in self.starts}
        for task in tasks:
            M.DREAM_TASK_TRUSTED.labels(self.run, task or "unknown").set(float(task in ok))
        admitted = sorted(tasks & ok)
        if admitted != self.trusted_logged:  # logged when the admitted tasks change
            log.info("trust gate: dreaming %s; held back %s", admitted, sorted(tasks - ok))
            self.trusted_logged = admitted
        return [s for s in self.starts if s.task in ok]

    def on_consumed(self, rec: records.Control) -> None:
        """The trainer's progress message: its version and this generator's consumed dreams."""
        if self.credit is None or rec.sender != "trainer":
            return
        dreams = rec.info.get("dreams") or {}
        mine = dreams.get(self.producer_id) or {}
        producers = len(set(dreams) | {self.producer_id})
        self.credit.on_consumed(int(rec.info.get("version", -1)), mine, producers, time.time())

    def pace_open(self) -> bool:
        """Whether a window's room is left (``dream.pace``); why not is logged when the wait
        begins and every 30 s while it lasts, and the time is counted as ``paced``."""
        c = self.credit
        if c is None:
            return True
        now, version = time.time(), int(self.slots["policy"].version or 0)
        c.on_version(version, now)
        lost = c.written_off_total
        ok, why = c.decide(now, version)
        M.DREAM_IN_FLIGHT.labels(self.run).set(c.in_flight())
        M.DREAM_PACE_WINDOW.labels(self.run).set(c.limit())
        if c.written_off_total > lost:
            M.DREAM_PACE_WRITTEN_OFF.labels(self.run).inc(c.written_off_total - lost)
            log.warning(
                "pacing: nothing in flight settled for %.0fs: %d dreamed episodes written off, "
                "dreaming one more window",
                c.timeout_s,
                c.written_off_total - lost,
            )
        if why and (not self.pace_reason or now - self._pace_logged >= 30.0):
            log.info("pacing: waiting: %s", why)
            self._pace_logged = now
        elif not why and self.pace_reason:
            log.info("pacing: dreaming again (%d in flight, window %d)", c.in_flight(), c.limit())
        self.pace_reason = why
        return ok

    def loop(self) -> None:
        while not self.stop.is_set():
            t0 = self.iteration_t0 = time.time()
            can_dream = self.ready and bool(self.starts) and not self.pace_reason
            # a paced wait polls with a timeout: the trainer's next progress message ends it
            self.poll(timeout_ms=0 if can_dream else 500)
            state = "idle"
            if self.ready and self.starts:
                gate = self.gate_open() and bool(self.trusted_starts())
                M.DREAM_GATE_OPEN.labels(self.run).set(float(gate))
                if gate and self.pace_open():
                    self.dream_once()
                    trim_heap()  # a round's decoding caches are not kept resident
                    state = "dreaming"
                elif gate:
                    state = "paced"
                else:
                    state = "gated"
                    self.stop.wait(1.0)
            M.DREAM_SECONDS.labels(self.run, state).inc(time.time() - t0)
            self.pub.check()
            self.watcher.check()

    def close(self) -> None:
        self.watcher.stop()
        self.loader.shutdown(wait=False, cancel_futures=True)
        close_component(self.consumer, self.pub, self.work)
