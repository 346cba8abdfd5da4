"""``models.checkpoints.reader.Prefetcher`` and ``ModelSlot.prefetch``/``install``: an announced version is
downloaded and loaded while the model in use stays in use; the reader's next refresh installs it
without downloading it again; a failed prefetch hands the reload back to the reader."""

import threading
from pathlib import Path
from types import SimpleNamespace

from core.config import Config
from models.checkpoints.reader import ModelSlot, Prefetcher
from streams.topics import Topics


class _Store:
    def __init__(self) -> None:
        self.value: dict | None = None
        self.fail = False

    def latest(self, kind: str) -> dict | None:
        if self.fail:
            raise OSError("S3 down")
        return self.value


class _Slot(ModelSlot):
    def __init__(self, *a, gate: threading.Event | None = None, **kw) -> None:
        super().__init__(*a, **kw)
        self.prepared: list[int] = []
        self.gate = gate

    def _prepare(self, version, manifest_sha256):
        if self.gate is not None:
            assert self.gate.wait(5)  # the download and load take a while
        self.prepared.append(version)
        self._ready = (version, object(), None, {"v": version}, Path("/nonexistent") / str(version))


def test_an_announced_version_loads_beside_the_one_in_use_and_installs_at_the_next_refresh():
    store, stop, ready = _Store(), threading.Event(), threading.Event()
    gate = threading.Event()
    gate.set()
    slot = _Slot(store, "policy", Path("/nonexistent"), "r-prefetch", gate=gate)
    store.value = {"version": 1, "manifest_sha256": "a"}
    assert slot.refresh() and slot.version == 1
    in_use = slot.model
    pf = Prefetcher([slot], ready.set, stop, name="t-prefetch").start()
    try:
        store.value = {"version": 2, "manifest_sha256": "b"}
        assert not slot.known(2)
        gate.clear()
        pf.want()
        assert not ready.wait(0.2)  # still downloading: nothing ready, the old model in use
        assert slot.model is in_use and slot.version == 1
        gate.set()
        assert ready.wait(5)
        # ready, not in use: the reader keeps acting with v1 until its next refresh
        assert slot.model is in_use and slot.version == 1 and slot.known(2)
        assert slot.refresh() and slot.version == 2 and slot.extra == {"v": 2}
        assert slot.model is not in_use
        assert slot.prepared == [1, 2]  # installed, not downloaded a second time
        assert not slot.refresh()  # nothing new
    finally:
        stop.set()
        pf.thread.join(5)


def test_a_failed_prefetch_hands_the_reload_to_the_reader():
    store, stop, ready = _Store(), threading.Event(), threading.Event()
    slot = _Slot(store, "policy", Path("/nonexistent"), "r-prefetch-fail")
    pf = Prefetcher([slot], ready.set, stop, name="t-prefetch-fail").start()
    try:
        store.fail = True
        pf.want()
        assert ready.wait(5)  # the reader is told to reload: its own refresh reports the error
        assert slot.version is None and slot.prepared == []
    finally:
        stop.set()
        pf.thread.join(5)


def test_each_slot_is_reported_ready_as_it_finishes_and_the_dream_generator_gives_a_round_up_only_for_a_policy():
    from concurrent.futures import ThreadPoolExecutor

    from models.dream.dreamer import Dreamer

    store, stop = _Store(), threading.Event()
    slow = threading.Event()  # the world model's download takes longer
    pol = _Slot(store, "policy", Path("/nonexistent"), "r-prefetch-kinds")
    wm = _Slot(store, "world_model", Path("/nonexistent"), "r-prefetch-kinds", gate=slow)
    cfg = Config(run_id="r-prefetch-kinds")
    d = Dreamer(  # the dream generator's reload bookkeeping only (no Kafka, no S3)
        cfg.run_id,
        "p",
        cfg.dream,
        cfg.model,
        topics=Topics(cfg.run_id),
        slots={"policy": pol, "world_model": wm},
        pub=SimpleNamespace(),
        open_consumer=lambda **kw: None,
        watch=lambda on_announcement: SimpleNamespace(),
        work=Path("/nonexistent"),
        stop=stop,
    )
    d._runners, d.first_round = ("old",), False
    pool = ThreadPoolExecutor(2)
    pf = Prefetcher([pol, wm], d._prefetched.set, stop, pool=pool, on_slot_ready=d._slot_ready)
    pf.start()
    try:
        store.value = {"version": 3, "manifest_sha256": "c"}
        pf.want()
        # the policy is ready while the world model still downloads: the round is given up now
        assert d._announced.wait(5) and not d._prefetched.is_set()
        assert d.install_ready() and pol.version == 3 and wm.version is None
        assert d._runners is None and d.first_round  # the next round dreams with the new policy
        slow.set()
        assert d._prefetched.wait(5)  # the world model is ready: installed at the next round
        d._announced.clear()
        d.first_round = False
        assert not d._announced.is_set()  # a world model alone never gives a round up
        assert d.install_ready() and wm.version == 3 and d.first_round
        assert not d.install_ready()  # nothing left to install
    finally:
        stop.set()
        pf.thread.join(5)
        pool.shutdown()
