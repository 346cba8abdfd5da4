"""``models.reader.Prefetcher`` and ``ModelSlot.prefetch``/``install``: an announced version is
downloaded and loaded while the model in use stays in use; the reader's next refresh installs it
without downloading it again; a failed prefetch hands the reload back to the reader."""

import threading
from pathlib import Path

from models.reader import ModelSlot, Prefetcher


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
