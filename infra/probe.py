"""A probe publisher: counts what the broker acknowledged and finds it again by id.

Used by ``dynaweb chaos`` and the fault-injection suite (tests/faults).  A probe record is a
``Control`` of kind ``probe`` whose ``info["i"]`` is its id, published at ``rate``/s from the
probe's own thread through the project's ``streams.delivery.Publisher`` (``acks="all"``).
*Acknowledged* is that publisher's own accounting: after the final flush, ``outstanding == 0``
and ``lost == 0`` mean every record sent was acknowledged.  *Progress after a fault* is the first
moment the publisher has acknowledged more records than had been sent when the fault ended (so
at least one record sent after it went through).  It publishes to a topic of its own
(``dynaweb.<run>.probe``), so the read-back of an hour's soak reads only its own records."""

from __future__ import annotations

import threading
import time
from collections import Counter

from core.config import Config
from streams import records
from streams.kafka import ensure_topics, make_publisher, read_until_sentinel
from streams.offsets import read_offsets


class ProbeFailed(AssertionError):
    """The probe's publisher failed, or acknowledged records were not found again."""


class Probe:
    """Publishes probe records at ``rate``/s from its own thread (the publisher's only user)."""

    def __init__(self, cfg: Config, rate: float = 20.0, idempotence: bool | None = None):
        self.cfg = cfg
        if idempotence is not None:
            cfg.kafka.idempotence = idempotence
        self.topic = ensure_topics(cfg).probe  # a topic of its own: the read-back stays small
        self.pub = make_publisher(cfg.kafka, client="fault-probe", run=cfg.run_id)
        self.rate = rate
        self.sent = 0
        self.fault_end: tuple[float, int] | None = None  # (time, records sent by then)
        self.progress_at: float | None = None  # first ack beyond what was sent by the fault's end
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fault-probe", daemon=True)

    def start(self) -> Probe:
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self.pub.send(self.topic, self._record(self.sent))
                self.sent += 1
                self._note_progress()
                self._stop.wait(1 / self.rate)
        except BaseException as e:  # noqa: BLE001 - reported by stop()
            self.error = e

    def _record(self, i: int) -> records.Control:
        return records.Control(self.cfg.run_id, "probe", "fault-probe", float(i), info={"i": i})

    def _note_progress(self) -> None:
        end = self.fault_end
        if end is not None and self.progress_at is None and self.pub.acked > end[1]:
            self.progress_at = time.time()

    def halt(self) -> None:
        """Stop sending (a failed test's clean-up; ``stop`` also waits for acknowledgements)."""
        self._stop.set()

    def fault_ended(self) -> None:
        self.fault_end = (time.time(), self.sent)
        self.progress_at = None

    def recovery_s(self, timeout: float) -> float | None:
        """Seconds from the fault's end to the first acknowledgement of a later record (waits up
        to ``timeout``); None if none came."""
        assert self.fault_end is not None
        deadline = self.fault_end[0] + timeout
        while self.progress_at is None and time.time() < deadline and self.error is None:
            time.sleep(0.1)
        if self.error is not None:
            raise ProbeFailed(f"the probe publisher failed: {self.error!r}")
        return None if self.progress_at is None else self.progress_at - self.fault_end[0]

    def wait_progress(self, timeout: float) -> float:
        """``recovery_s``, failing when nothing was acknowledged within ``timeout``."""
        took = self.recovery_s(timeout)
        if took is None:
            raise ProbeFailed(
                f"no record acknowledged within {timeout:.0f}s of the fault's end "
                f"(sent {self.sent}, acked {self.pub.acked}, errors {self.pub.errors})"
            )
        return took

    def stop(self, flush_s: float = 120.0) -> dict:
        """Stop sending, wait for every acknowledgement; the publisher's counts."""
        self._stop.set()
        self._thread.join(30)
        if self.error is not None:
            raise ProbeFailed(f"the probe publisher failed: {self.error!r}")
        self.pub.flush(timeout=flush_s)
        counts = {
            "sent": self.sent,
            "acked": self.pub.acked,
            "outstanding": self.pub.outstanding,
            "lost": self.pub.lost,
            "errors": self.pub.errors,
            "resent": self.pub.resent,
            "rebuilds": self.pub.rebuilds,
        }
        self.pub.close()
        return counts

    def ends(self) -> dict[int, int]:
        """Per partition of the probe's topic, 1 + the highest offset the broker acknowledged."""
        return {p: end for (t, p), end in self.pub.acked_ends.items() if t == self.topic}

    def read_back(self, timeout_s: float = 600.0) -> dict:
        """Probe ids an independent consumer reads from the topic: found, duplicates, and the
        acknowledged ids (``0 .. sent-1`` when all were acknowledged) that are missing.  Read by
        offsets (``streams.offsets.read_offsets``: up to the acknowledged ends, several ranges at
        once, at most ``timeout_s``); without acknowledged offsets, up to a sentinel."""
        seen: Counter = Counter()
        ends = self.ends()
        if ends:
            raws = (v for _p, _o, v in read_offsets(self.cfg.kafka, self.topic, ends, timeout_s))
        else:
            raws = (
                raw
                for _m, raw in read_until_sentinel(
                    self.cfg.kafka, self.topic, self.cfg.run_id, timeout_s
                )
            )
        for raw in raws:
            rec = records.decode(raw)
            if isinstance(rec, records.Control) and rec.kind == "probe":
                seen[rec.info["i"]] += 1
        missing = sorted(set(range(self.sent)) - set(seen))
        return {
            "found": len(seen),
            "duplicates": sum(seen.values()) - len(seen),
            "missing": missing,
        }

    def check_nothing_lost(self, counts: dict) -> dict:
        """Every acknowledged probe is read back by an independent consumer; duplicates are
        counted (re-sending is at-least-once), never a failure."""
        if counts["lost"] or counts["outstanding"] or counts["acked"] != counts["sent"]:
            raise ProbeFailed(f"not every record was acknowledged: {counts}")
        back = self.read_back()
        missing = back.pop("missing")
        if missing:
            raise ProbeFailed(f"{len(missing)} acknowledged records not found: {missing[:20]}")
        return back
