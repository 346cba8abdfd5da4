"""``models.reader.release_memory``: a replaced model held in reference cycles is freed at the
next load; the objects that existed at the first load are frozen out of collection."""

from __future__ import annotations

import gc
import weakref

import torch

from models import reader as checkpoint


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
