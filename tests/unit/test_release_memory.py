"""``models.checkpoints.reader.release_memory``: a replaced model held in reference cycles is freed at the
next load; the objects that existed at the first load are frozen out of collection."""

from __future__ import annotations

import gc
import threading
import weakref

import torch

from core.waiting import wait_until
from models.checkpoints import reader as checkpoint


class _Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(256, 256))
        self.me = self  # a reference cycle, as modules with hooks and closures have


def test_a_model_in_a_cycle_is_freed_and_collection_is_cheap(monkeypatch) -> None:
    monkeypatch.setattr(checkpoint, "_FROZEN", False)
    gc.unfreeze()
    checkpoint.release_memory()  # the first load: freeze what exists
    assert checkpoint._FROZEN and gc.get_freeze_count() > 1000
    m = _Model()
    ref = weakref.ref(m)
    del m
    assert ref() is not None  # only a collection frees a cycle
    checkpoint.release_memory()
    assert ref() is None
    gc.unfreeze()  # leave the test process as it was


def test_the_prefetch_thread_frees_a_replaced_model_while_idle(tmp_path, monkeypatch) -> None:
    """Installing a new version marks the old model replaced; the prefetch thread frees it while
    it waits for the next announcement, so the next load does not pay for the collection."""
    monkeypatch.setattr(checkpoint, "_FROZEN", True)
    checkpoint._REPLACED.clear()
    slot = checkpoint.ModelSlot(None, "policy", tmp_path, "t-release")
    old = _Model()
    slot.model, slot.version = old, 1
    ref = weakref.ref(old)
    del old
    (tmp_path / "policy-2").mkdir()
    slot._ready = (2, _Model(), None, {}, tmp_path / "policy-2")
    assert slot.install() and slot.version == 2 and checkpoint._REPLACED.is_set()
    assert ref() is not None  # held in its cycle until a collection
    stop = threading.Event()
    checkpoint.Prefetcher([slot], lambda: None, stop, name="t-prefetch").start()
    try:
        wait_until(lambda: ref() is None and not checkpoint._REPLACED.is_set(), 5.0, "the free")
    finally:
        stop.set()
