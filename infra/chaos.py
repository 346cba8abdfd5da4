"""``dynaweb chaos``: faults injected on a schedule into a running loop, and what they did.

Run it beside ``dynaweb up`` (the same ``--home`` and ``--run-id``)::

    dynaweb up --duration 3700 &
    dynaweb chaos --duration 3600 --every 300 --json

After a warm-up (every component makes progress), one fault every ``--every`` seconds, in the
order of ``--faults`` and round again:

=====================  ==========================================================================
``broker-kill``        the broker's process group killed (-9) and started again at once
``broker-down``        the broker killed and left down for ``--outage`` seconds
``s3-stall``           the S3 store stopped (SIGSTOP) for ``--outage`` seconds (the embedded
                       broker keeps its log there)
``prometheus-stop``    Prometheus stopped for ``--outage`` seconds
``kill-<component>``   SIGKILL of ``stream-worker``, ``trainer``, ``dream`` or ``collector`` (the
                       expert collector); ``dynaweb up`` restarts it
``malformed-flood``    1,000 malformed records published onto the real-transitions topic
``app-kill``           the web application's process group killed (-9) (only where ``up`` runs the
                       shop: ``up.app_tasks``); ``up`` starts it again
=====================  ==========================================================================

Recovery of each fault, bounded by ``--recovery`` (60 s): broker and store faults, the first
acknowledgement of a probe record sent after the fault ended (``infra.probe``); a kill, the new
process's own progress counter above 0; Prometheus, a query answering again; the flood, the
stream worker's dead-letter count up by the flood; the app, a step of its collector after the app
answers again (the episodes of the outage fail with the reason, counted in its detail).  Meanwhile ``infra.soak`` samples every
component's memory, restarts, totals and the checkpoint version; at the end every topic's
acknowledged records are compared with what an independent reader finds.  The report
(``--report``, and one JSON line with ``--json``) is what docs/reliability.md publishes.
"""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from core.config import Config
from core.metrics import run_targets
from core.prom import Prom
from infra.probe import Probe
from infra.stack import Stack, StackError
from streams.kafka import KafkaError, ensure_topics, make_publisher

# component -> (component_id prefix, its progress counter)
PROGRESS = {
    "stream-worker": ("", "dynaweb_stream_transitions"),
    "trainer": ("", "dynaweb_trainer_steps"),
    "dream": ("", "dynaweb_dream_steps"),
    "collector": ("collector-expert", "dynaweb_collector_steps"),
}
FAULTS = (
    "kill-stream-worker",
    "broker-kill",
    "kill-trainer",
    "s3-stall",
    "kill-dream",
    "prometheus-stop",
    "kill-collector",
    "broker-down",
    "malformed-flood",
)
# faults of a run whose stack includes the shop (``up.app_tasks``); part of the default schedule
# only there
APP_FAULTS = ("app-kill",)
FLOOD = 1000


class ChaosError(StackError):
    """The loop to inject faults into is not there (or not of this run)."""


def default_faults(cfg: Config) -> list[str]:
    """Every fault of the suite, the app's too when this run's stack runs the shop."""
    return [*FAULTS, *(APP_FAULTS if Stack(cfg).pid("shop") is not None else ())]


def target(cfg: Config, component: str, prefix: str | None = None) -> dict | None:
    """The metrics target (labels, address) of a running component of this run."""
    prefix = PROGRESS[component][0] if prefix is None else prefix
    for _f, entry in run_targets(cfg):
        labels = entry["labels"]
        if labels["component"] == component and labels["component_id"].startswith(prefix):
            return entry
    return None


def counter(entry: dict, name: str) -> float:
    """A counter's value summed over its labels, scraped from the target itself (0 if it does
    not answer)."""
    try:
        url = f"http://{entry['targets'][0]}/metrics"
        with urllib.request.urlopen(url, timeout=3) as r:
            text = r.read().decode()
    except OSError:
        return 0.0
    total = 0.0
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name in (name, name + "_total"):
                total += s.value
    return total


def progressing(cfg: Config, component: str, not_pid: int | None = None) -> dict | None:
    """The component's target if its process (other than ``not_pid``) has made progress."""
    entry = target(cfg, component)
    if entry is None or entry["labels"]["pid"] == str(not_pid):
        return None
    return entry if counter(entry, PROGRESS[component][1]) > 0 else None


def bad_record(i: int) -> bytes:
    """Malformed record ``i``: half not JSON, half JSON that is no transition."""
    if i % 2:
        return f"\x00not json {i}".encode()
    return json.dumps({"type": "transition", "schema": 1, "flood": i}).encode()


def wait_until(cond: Callable[[], object], timeout: float, every: float = 0.5) -> float | None:
    """Seconds until ``cond()`` was true, or None after ``timeout``."""
    t0 = time.time()
    while time.time() - t0 < timeout:
        if cond():
            return time.time() - t0
        time.sleep(every)
    return None


@dataclass
class Event:
    fault: str
    at: float
    outage_s: float = 0.0
    recovery_s: float | None = None
    ok: bool = False
    detail: dict = field(default_factory=dict)


class Injector:
    """Injects one named fault into the running loop of ``cfg`` and measures its recovery."""

    def __init__(self, cfg: Config, probe: Probe, outage_s: float, recovery_s: float = 60.0):
        self.cfg, self.probe = cfg, probe
        self.stack = Stack(cfg)
        self.outage_s, self.recovery_s = outage_s, recovery_s

    def inject(self, fault: str) -> Event:
        """Inject ``fault`` and wait for the recovery.  A fault that could not be injected or
        undone (a service that does not come back) is an event that failed, with the error in
        its ``detail``; the schedule goes on."""
        ev = Event(fault, time.time())
        try:
            if fault.startswith("kill-"):
                self._kill(fault.removeprefix("kill-"), ev)
            else:
                getattr(self, "_" + fault.replace("-", "_"))(ev)
        except (OSError, StackError) as e:
            ev.detail["error"] = f"{type(e).__name__}: {e}"
        ev.ok = ev.recovery_s is not None and ev.recovery_s <= self.recovery_s
        return ev

    def _service_pid(self, name: str) -> int:
        pid = self.stack.pid(name)
        if pid is None:
            raise ChaosError(f"no running {name} started by this stack (dynaweb infra status)")
        return pid

    def _probe_recovery(self, ev: Event, started: float) -> None:
        self.probe.fault_ended()
        ev.outage_s = round(time.time() - started, 1)
        took = self.probe.recovery_s(self.recovery_s)
        ev.recovery_s = None if took is None else round(took, 1)

    def _broker_kill(self, ev: Event, down_s: float = 0.0) -> None:
        self.stack.kill("broker")
        started = time.time()
        try:
            time.sleep(down_s)
        finally:
            self._restart("broker")
        self._probe_recovery(ev, started)

    def _restart(self, name: str) -> None:
        """Start a service again as ``infra up`` does, retrying within the recovery bound (the
        fault must not outlive the schedule)."""
        deadline = time.time() + self.recovery_s
        while True:
            try:
                self.stack.up(only=[name])
                return
            except StackError:
                if time.time() > deadline:
                    raise
                time.sleep(1)

    def _broker_down(self, ev: Event) -> None:
        self._broker_kill(ev, self.outage_s)

    def _s3_stall(self, ev: Event) -> None:
        pid = self._service_pid("s3")
        os.killpg(pid, signal.SIGSTOP)
        started = time.time()
        try:
            time.sleep(self.outage_s)
        finally:
            os.killpg(pid, signal.SIGCONT)
        self._probe_recovery(ev, started)

    def _prometheus_stop(self, ev: Event) -> None:
        before = {c: self._progress(c) for c in PROGRESS}
        self.stack.down(only=["prometheus"])
        started = time.time()
        try:
            time.sleep(self.outage_s)
            during = {c: self._progress(c) for c in PROGRESS}
        finally:
            self._restart("prometheus")
        ev.outage_s = round(time.time() - started, 1)
        ev.detail["kept_progressing"] = sorted(c for c in PROGRESS if during[c] > before[c])
        prom = Prom(f"http://127.0.0.1:{self.cfg.stack.prometheus_port}", timeout=3)

        def answers() -> bool:
            try:
                return bool(prom.query(f'up{{job="dynaweb", run="{self.cfg.run_id}"}}'))
            except (OSError, RuntimeError, ValueError):
                return False

        took = wait_until(answers, self.recovery_s)
        ev.recovery_s = None if took is None else round(took, 1)

    def _progress(self, component: str) -> float:
        entry = target(self.cfg, component)
        return counter(entry, PROGRESS[component][1]) if entry else 0.0

    def _kill(self, component: str, ev: Event) -> None:
        if component not in PROGRESS:
            raise ChaosError(f"unknown component {component!r}; one of {', '.join(PROGRESS)}")
        entry = target(self.cfg, component)
        if entry is None:
            raise ChaosError(f"no running {component} of run {self.cfg.run_id}")
        pid = int(entry["labels"]["pid"])
        os.killpg(pid, signal.SIGKILL)  # dynaweb up starts each component in its own group
        ev.detail["pid"] = pid
        took = wait_until(lambda: progressing(self.cfg, component, not_pid=pid), self.recovery_s)
        ev.recovery_s = None if took is None else round(took, 1)

    def _app_kill(self, ev: Event) -> None:
        """The shop killed; recovered when ``up`` has it answering again and the app's collector
        has made a step since."""
        from core.net import http_status

        app = target(self.cfg, "collector", prefix="collector-app")
        if app is None:
            raise ChaosError(f"no running app collector of run {self.cfg.run_id} (up.app_tasks)")
        url = self.stack.services()["shop"].endpoint + "/answer/"
        failures0 = counter(app, "dynaweb_collector_app_failures")
        ev.detail["pid"] = self.stack.kill("shop")
        started = time.time()
        back = wait_until(lambda: http_status(url, timeout=3) == 200, self.recovery_s)
        if back is None:
            return
        steps = counter(app, "dynaweb_collector_steps")
        stepped = wait_until(
            lambda: counter(app, "dynaweb_collector_steps") > steps,
            max(1.0, self.recovery_s - (time.time() - started)),
        )
        ev.detail["app_back_s"] = round(back, 1)
        ev.detail["app_failures"] = counter(app, "dynaweb_collector_app_failures") - failures0
        ev.recovery_s = None if stepped is None else round(time.time() - started, 1)

    def _malformed_flood(self, ev: Event) -> None:
        worker = target(self.cfg, "stream-worker")
        if worker is None:
            raise ChaosError(f"no running stream-worker of run {self.cfg.run_id}")
        before = counter(worker, "dynaweb_stream_dead_letters")
        topic = ensure_topics(self.cfg).real
        pub = make_publisher(self.cfg.kafka, client="chaos-flood", run=self.cfg.run_id)
        try:
            for i in range(FLOOD):
                pub.send(topic, bad_record(i), key=f"flood-{i % 7}")
            pub.flush(timeout=self.recovery_s)
        finally:
            pub.close()
        ev.detail["acked"] = pub.acked
        took = wait_until(
            lambda: counter(worker, "dynaweb_stream_dead_letters") - before >= FLOOD,
            self.recovery_s,
        )
        ev.recovery_s = None if took is None else round(took, 1)


def final_reads(report: dict, read_back: Callable[[], dict], check: Callable[[], dict]) -> None:
    """The probe's read-back and the topic check into ``report``; a read that fails (timed out,
    the broker gone because `up` ended first) is named in ``read_errors``, not raised."""
    try:
        back = read_back()
        report["probe"].update(back, missing=len(back["missing"]))
    except (TimeoutError, OSError, KafkaError) as e:
        report["read_errors"].append(f"probe read-back: {type(e).__name__}: {e}")
    try:
        report["topics"] = check()
    except (TimeoutError, OSError, KafkaError) as e:
        report["read_errors"].append(f"topic check: {type(e).__name__}: {e}")


def event_dict(ev: Event) -> dict:
    return asdict(ev)


def _progress_totals(watch: Any) -> dict:
    steps = watch.total("dynaweb_trainer_steps_total", by="model")
    return {
        "policy_steps": steps.get("policy", 0),
        "wm_steps": steps.get("world_model", 0),
        "collector_steps": sum(watch.total("dynaweb_collector_steps_total").values()),
        "dream_steps": sum(watch.total("dynaweb_dream_steps_total").values()),
    }


def _warm_up(cfg: Config, timeout_s: float) -> float:
    t0 = time.time()
    for comp in PROGRESS:
        left = max(1.0, timeout_s - (time.time() - t0))
        if wait_until(lambda c=comp: progressing(cfg, c), left, every=2) is None:
            raise ChaosError(f"{comp} made no progress within {timeout_s:.0f}s of chaos' start")
    return time.time() - t0


def run(
    cfg: Config,
    duration_s: float,
    every_s: float,
    faults: list[str],
    outage_s: float,
    recovery_s: float = 60.0,
    warmup_s: float = 600.0,
    sample_s: float = 15.0,
    log: Callable[[str], None] = print,
    on_report: Callable[[dict], None] | None = None,
    max_checkpoint_gap_s: float = 600.0,
    read_timeout_s: float = 1800.0,
) -> dict:
    """Inject ``faults`` in turn every ``every_s`` into the running loop for ``duration_s``; the
    soak's report (``ok``: every fault recovered within ``recovery_s``, no acknowledged probe
    missing, every topic holds at least what was acknowledged, and the trainer never went longer
    than ``max_checkpoint_gap_s`` without a new version: a component can make progress of some
    kind and still be stalled where it matters).  Each final read from the first record (the
    probe's, then each topic's) may take ``read_timeout_s``: on the embedded broker with s3
    storage a read of an hour's probe topic (one record per batch) took over 10 minutes at load 10
    and 16 s with the components paused."""
    from infra.soak import Watch, topic_check

    unknown = [f for f in faults if f not in (*FAULTS, *APP_FAULTS)]
    if unknown:
        raise ChaosError(
            f"unknown fault(s) {', '.join(unknown)}; the faults are "
            f"{', '.join((*FAULTS, *APP_FAULTS))}"
        )
    if wait_until(lambda: run_targets(cfg), min(warmup_s, 60.0), every=1) is None:
        raise ChaosError(
            f"no running component of run {cfg.run_id!r}: start `dynaweb up` first, with the same "
            "--home and --run-id"
        )
    t0 = time.time()
    watch = Watch(cfg, sample_s).start()
    probe = Probe(cfg, rate=5.0).start()
    warm = _warm_up(cfg, warmup_s)
    log(f"[chaos] every component progressing after {warm:.0f}s; a fault every {every_s:.0f}s")
    inj = Injector(cfg, probe, outage_s, recovery_s)
    events: list[Event] = []
    next_at = time.time()
    while time.time() - t0 < duration_s:
        if time.time() >= next_at:
            ev = inj.inject(faults[len(events) % len(faults)])
            events.append(ev)
            log(
                f"[chaos] {ev.fault}: outage {ev.outage_s:.0f}s, recovered in "
                f"{ev.recovery_s if ev.recovery_s is not None else '(not within the bound)'}s"
            )
            next_at = ev.at + every_s
        time.sleep(1)
    counts = probe.stop()
    watch.stop()
    report = {
        "run": cfg.run_id,
        "duration_s": round(time.time() - t0),
        "faults": [event_dict(e) for e in events],
        "probe": {**counts, "found": None, "duplicates": None, "missing": None},
        "topics": {},
        "memory": watch.memory_report(),
        "restarts": watch.restarts(),
        "checkpoints": watch.checkpoint_report(),
        "load": watch.load_report(),
        "cpu": watch.cpu_report(),
        "progress": _progress_totals(watch),
        "read_errors": [],
    }
    if on_report is not None:
        on_report(report)  # what was watched is kept even if a final read fails
    final_reads(
        report,
        lambda: probe.read_back(read_timeout_s),
        lambda: topic_check(
            cfg, watch.total("dynaweb_client_acked_records_total", by="topic"), read_timeout_s
        ),
    )
    gap = report["checkpoints"]["longest_gap_s"]
    report["checkpoint_gap_ok"] = gap is not None and gap <= max_checkpoint_gap_s
    # every component whose memory was judged (infra.soak.window_slope) grew under the limit
    report["memory_ok"] = all(m.get("slope_ok") is not False for m in report["memory"].values())
    report["ok"] = (
        report["checkpoint_gap_ok"]
        and report["memory_ok"]
        and all(e.ok for e in events)
        and not report["read_errors"]
        and report["probe"]["missing"] == 0
        and counts["lost"] == 0
        and all(t["complete"] for t in report["topics"].values())
    )
    return report
