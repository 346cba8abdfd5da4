"""The trainer's world-model replay (``models.train.replay``) keeps transitions packed and decodes
only what a batch draws; ``core.process.trim_heap`` hands a step's freed peak back to the OS."""

from __future__ import annotations

import torch

from core.process import trim_heap
from models.train.replay import Packed, WorldModelReplay
from streams import records
from tests.factories import transition


def _page(n: int) -> str:
    # a real application's page: many distinct lines, as the shop's (not one repeated character)
    return "\n".join(
        f'[{i}] link "Product {i * 7919 % 10007} - {i}.99" in row {i}' for i in range(n)
    )


def _shop_like(ep: str, step: int, done: bool = False):
    t = transition("r", ep, step, "expert", done)
    t.obs = {"instruction": "Put 3 units of X in your basket.", "tree": _page(120)}
    t.next_obs = {"instruction": t.obs["instruction"], "tree": _page(121)}
    return t


def test_a_packed_transition_decodes_to_the_record_it_was_read_as() -> None:
    t = _shop_like("e1", 0)
    raw = records.encode(t)
    p = Packed.of(t, raw)
    assert p.key == ("e1", 0) and not p.done
    assert records.encode(p.unpack()) == raw
    assert Packed.of(t).unpack() == p.unpack()  # encoded from the transition when no raw
    assert len(p.blob) < len(raw) / 2  # a page's lines compress


def test_the_replay_batches_decoded_transitions_and_drops_redeliveries() -> None:
    r = WorldModelReplay()
    ts = [_shop_like("e1", i, done=i == 3) for i in range(4)]
    assert all(r.add(t, records.encode(t)) for t in ts)
    assert not r.add(ts[0], records.encode(ts[0]))  # the broker delivered it again
    assert len(r.buffer) == 4 and len(r.terminal) == 1 and r.terminal[0].key == ("e1", 3)
    got = r.batch(4)
    assert len(got) == 4 and [t.key for t in got[:2]] == [("e1", 0), ("e1", 1)]  # fresh first
    by_key = {t.key: records.encode(t) for t in ts}
    assert all(records.encode(g) == by_key[g.key] for g in got)  # decoded as they were read
    assert [t.key for t in r.take_unjudged()] == []  # expert transitions are not judged


def _rss_mb() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * 4096 / 1e6


def test_trim_heap_hands_a_freed_peak_back() -> None:
    kept = [torch.ones(100, 1000) for _ in range(1500)]  # 400 KB each, 600 MB in all
    del kept[::2]  # 300 MB freed in holes between live blocks: glibc keeps them resident
    before = _rss_mb()
    trim_heap()
    assert before - _rss_mb() > 150, (before, _rss_mb())
    assert len(kept) == 750 and float(kept[-1].sum()) == 100_000.0
