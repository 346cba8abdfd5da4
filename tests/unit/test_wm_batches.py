"""The world-model study's sampler: shuffled epochs over every transition, plus a fixed share of
every batch drawn from the terminal steps (``wm_study.terminal_share``)."""

import random
from collections import Counter
from types import SimpleNamespace

from evaluation.studies.world_model.sampling import batches, terminal_indices


def test_without_a_share_every_index_comes_once_per_epoch():
    it = batches(10, 5, random.Random(0))
    got = next(it) + next(it)
    assert sorted(got) == list(range(10))


def test_a_share_fills_its_places_from_the_terminal_steps():
    terminal = [3, 7]
    it = batches(100, 8, random.Random(0), [terminal], 0.25)
    seen = Counter()
    for _ in range(50):
        b = next(it)
        assert len(b) == 8
        assert sum(i in terminal for i in b[-2:]) == 2  # the 2 places of 8 are terminal steps
        seen.update(b)
    # 2 of 100 indices are terminal: without the share each would come about 4 times in 400 draws
    assert seen[3] >= 50 and seen[7] >= 50
    assert seen[3] + seen[7] >= 100


def test_the_share_never_takes_the_whole_batch_and_no_terminal_steps_means_none():
    b = next(batches(100, 4, random.Random(0), [[1]], 1.0))
    assert len(b) == 4 and b[1:] == [1, 1, 1]  # one place from the epoch, three from [1]
    assert len(next(batches(100, 4, random.Random(0), [[]], 0.5))) == 4


def test_every_task_gets_the_terminal_places_equally_whatever_its_size():
    big, small = list(range(0, 90)), [95, 96]
    it = batches(100, 8, random.Random(0), [big, small], 0.5)
    drawn = Counter()
    for _ in range(400):
        drawn.update("small" if i in small else "big" for i in next(it)[4:])
    assert 0.4 < drawn["small"] / (drawn["small"] + drawn["big"]) < 0.6


def test_terminal_indices_are_the_done_steps_by_task():
    ts = [
        SimpleNamespace(done=d, task=k)
        for d, k in ((False, "a"), (True, "a"), (True, "b"), (True, "a"))
    ]
    assert terminal_indices(ts) == [[1, 3], [2]]


def test_the_trainers_batch_takes_the_newest_then_terminal_steps_then_the_buffer():
    from collections import deque

    from models.train.replay import world_model_batch

    fresh = deque(["f1", "f2", "f3", "f4", "f5"])
    buffer = [f"b{i}" for i in range(100)]
    terminal = ["t1", "t2", "t3"]
    got = world_model_batch(fresh, buffer, terminal, 8, 0.25, random.Random(0))
    assert got[:4] == ["f1", "f2", "f3", "f4"] and list(fresh) == ["f5"]
    assert sorted(got[4:6]) == sorted(set(got[4:6])) and set(got[4:6]) <= set(terminal)
    assert len(got) == 8 and all(g.startswith("b") for g in got[6:])
    # without a share (or with no terminal steps yet): the newest, then the buffer, as before
    plain = world_model_batch(deque(["f"]), buffer, terminal, 8, 0.0, random.Random(0))
    assert plain[0] == "f" and len(plain) == 8 and all(g.startswith("b") for g in plain[1:])
    assert len(world_model_batch(deque(), buffer, [], 8, 0.5, random.Random(0))) == 8
    assert world_model_batch(deque(), [], [], 8, 0.5, random.Random(0)) == []
