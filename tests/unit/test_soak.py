"""The soak report's arithmetic (``infra.soak``) and ``dynaweb chaos``'s refusals; the real
command runs on the real loop in tests/faults/test_loop_faults.py."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from core.config import Config
from core.proctree import PAGE, tree_rss
from infra.chaos import FAULTS, ChaosError, bad_record, run
from infra.soak import MB, Watch, render, slope_per_h, stable_id


def _proc(root: Path, pid: int, ppid: int, pages: int, comm: str = "python3") -> None:
    d = root / str(pid)
    d.mkdir()
    # comm may hold spaces and parentheses: the fields are read after the last ")"
    rest = ["S", str(ppid), str(pid)] + ["0"] * 18 + [str(pages)] + ["0"] * 20
    (d / "stat").write_text(f"{pid} ({comm}) " + " ".join(rest) + "\n")


def test_tree_rss_sums_a_process_and_all_its_descendants(tmp_path: Path) -> None:
    _proc(tmp_path, 10, 1, 100)
    _proc(tmp_path, 11, 10, 50, "node (driver)")
    _proc(tmp_path, 12, 11, 400, "chrome) x")  # a grandchild in its own process group
    _proc(tmp_path, 20, 1, 999)  # not ours
    (tmp_path / "self").mkdir()
    assert tree_rss(10, tmp_path) == 550 * PAGE
    assert tree_rss(11, tmp_path) == 450 * PAGE
    assert tree_rss(99, tmp_path) == 0


def test_slope_per_h() -> None:
    pts = [(t, 100 + 2 * t / 60) for t in range(0, 600, 60)]  # +2 MB a minute
    assert slope_per_h(pts) == pytest.approx(120.0)
    assert slope_per_h(pts[:3]) is None
    assert slope_per_h([(5, 1.0)] * 5) is None


def _watch() -> Watch:
    return Watch(Config(run_id="soak-unit"), sample_s=1)


def test_memory_report_measures_growth_of_the_longest_lived_process() -> None:
    w = _watch()
    # pid 1 lives 100 s and grows fast; pid 2 (after a restart) lives 1,000 s at +1 MB per 100 s
    w.memory["trainer"] = [(t, 1, (500 + t) * MB) for t in range(0, 100, 10)]
    w.memory["trainer"] += [(t, 2, int((300 + (t - 100) / 100) * MB)) for t in range(100, 1100, 10)]
    m = w.memory_report(settle_s=300)["trainer"]
    assert m["growth_mb_per_h"] == pytest.approx(36.0, abs=0.2)
    assert m["first_mb"] == 500.0 and m["max_mb"] == 590.0 and m["last_mb"] == pytest.approx(309.9)
    assert m["measured_over_s"] == 690


def test_checkpoint_report_finds_the_longest_time_without_a_new_version() -> None:
    w = _watch()
    w.versions = [(0, 1), (10, 1), (20, 2), (90, 2), (100, 3), (110, 3)]
    assert w.checkpoint_report() == {"first_version": 1, "last_version": 3, "longest_gap_s": 80}
    w.versions = [(0, 4), (50, 4)]  # never a new one: the whole time counts
    assert w.checkpoint_report()["longest_gap_s"] == 50
    assert _watch().checkpoint_report()["last_version"] is None


def test_totals_by_label() -> None:
    w = _watch()
    w.last = {
        ("dynaweb_client_acked_records_total", (("client", "a"), ("topic", "t1"))): 5.0,
        ("dynaweb_client_acked_records_total", (("client", "b"), ("topic", "t1"))): 7.0,
        ("dynaweb_client_acked_records_total", (("client", "b"), ("topic", "t2"))): 1.0,
        ("dynaweb_trainer_steps_total", (("model", "policy"),)): 3.0,
    }
    assert w.total("dynaweb_client_acked_records_total", by="topic") == {"t1": 12.0, "t2": 1.0}
    assert w.total("dynaweb_trainer_steps_total") == {"all": 3.0}


def test_render_names_every_fault_topic_and_component() -> None:
    rep = {
        "run": "r",
        "duration_s": 60,
        "faults": [{"fault": "s3-stall", "outage_s": 8.0, "recovery_s": None, "ok": False}],
        "probe": {
            "sent": 3,
            "acked": 3,
            "found": 3,
            "missing": 0,
            "duplicates": 0,
            "resent": 1,
            "rebuilds": 0,
        },  # fmt: skip
        "topics": {"dynaweb.r.real": {"acked": 5, "read": 6, "distinct": 5, "complete": True}},
        "memory": {
            "trainer": {"first_mb": 1.0, "last_mb": 2.0, "max_mb": 2.0, "growth_mb_per_h": None}
        },  # fmt: skip
        "restarts": {"trainer": 1},
        "checkpoints": {"first_version": 0, "last_version": 4, "longest_gap_s": 30},
        "progress": {},
    }
    text = render(rep)
    for needle in ("s3-stall", "dynaweb.r.real", "trainer", "v0 -> v4", "re-sent 1"):
        assert needle in text, text


def test_chaos_refuses_unknown_faults_and_a_missing_loop(tmp_path: Path) -> None:
    cfg = Config(run_id="no-loop-here", home=str(tmp_path))
    with pytest.raises(ChaosError, match="unknown fault"):
        run(cfg, 1, 1, ["kill-everything"], 1)
    with pytest.raises(ChaosError, match="start `dynaweb up` first"):
        run(cfg, 1, 1, list(FAULTS), 1, warmup_s=0.5)


def test_flood_records_are_malformed() -> None:
    from streams import records

    for i in range(4):
        with pytest.raises(records.RecordError):
            records.decode(bad_record(i))


def test_stable_id_drops_the_pid_of_a_default_id() -> None:
    assert stable_id({"component_id": "dream-vm-3346", "pid": "3346"}) == "dream-vm"
    assert stable_id({"component_id": "collector-expert-r1", "pid": "77"}) == "collector-expert-r1"


def _proc_cpu(root: Path, pid: int, ppid: int, ticks: int) -> None:
    d = root / str(pid)
    d.mkdir()
    rest = ["S", str(ppid)] + ["0"] * 9 + [str(ticks), str(ticks), "0", "0"] + ["0"] * 30
    (d / "stat").write_text(f"{pid} (x) " + " ".join(rest) + "\n")


def test_tree_cpu_sums_user_and_system_time_of_the_tree(tmp_path: Path) -> None:
    from core.proctree import TICK, tree_cpu_s

    _proc_cpu(tmp_path, 10, 1, 100)
    _proc_cpu(tmp_path, 11, 10, 50)
    _proc_cpu(tmp_path, 20, 1, 999)
    assert tree_cpu_s(10, tmp_path) == 300 / TICK
    assert tree_cpu_s(11, tmp_path) == 100 / TICK


def test_cpu_report_counts_every_process_of_a_component() -> None:
    w = Watch(Config())
    w.started, w.last_sample = 1000.0, 1100.0
    w.cpu["trainer"] = {5: [10.0, 60.0], 6: [0.0, 30.0]}  # restarted once: both processes count
    w.cpu["dream"] = {7: [5.0, 25.0]}
    rep = w.cpu_report()
    assert rep["cores"] == {"dream": 0.2, "trainer": 0.8}
    assert rep["components_total"] == 1.0 and rep["over_s"] == 100


def test_memory_report_tells_a_plateau_from_a_leak() -> None:
    w = _watch()
    # warm-up: +360 MB/h for 1,000 s, then flat; a leak: +36 MB/h throughout
    w.memory["dream"] = [(t, 1, int((200 + min(t, 1000) / 10) * MB)) for t in range(0, 3000, 10)]
    w.memory["trainer"] = [(t, 2, int((300 + t / 100) * MB)) for t in range(0, 3000, 10)]
    rep = w.memory_report(settle_s=300)
    assert rep["dream"]["growth_mb_per_h"] > 36 and rep["dream"]["growth_mb_per_h_second_half"] == 0
    assert rep["trainer"]["growth_mb_per_h_second_half"] == pytest.approx(36.0, abs=0.5)


def test_the_watch_samples_before_its_thread_starts(monkeypatch) -> None:
    """A component killed by the first fault (seconds after chaos starts) had its first process
    seen, so its restart is counted (the fourth soak showed the stream worker's first kill
    uncounted: the first sample came 15 s after the start)."""
    w = _watch()
    seen: list[float] = []
    monkeypatch.setattr(w, "sample", lambda: seen.append(time.time()))
    w.sample_s = 3600  # the thread's own samples would come an hour later
    w.start()
    try:
        assert len(seen) == 1
    finally:
        w._stop.set()


def test_the_memory_check_is_the_slope_over_the_last_40_minutes() -> None:
    from infra.soak import window_slope

    # 60 min: +600 MB/h for the first 20 min (warm-up), then +30 MB/h
    pts = [
        (t, 1, int((100 + (min(t, 1200) / 6 + max(0, t - 1200) / 120)) * MB))
        for t in range(0, 3601, 15)
    ]
    slope, covered = window_slope(pts, end=3600)
    assert slope == pytest.approx(30.0, abs=0.5) and covered == 2400
    assert window_slope(pts, end=1095) == (None, 1095)  # under 20 minutes: not judged
    # a restart 10 minutes before the end: the longest-lived process in the window is judged
    restarted = [p for p in pts if p[0] < 3000] + [(t, 2, 50 * MB) for t in range(3000, 3601, 15)]
    assert window_slope(restarted, end=3600)[0] == pytest.approx(30.0, abs=0.5)

    w = _watch()
    w.memory["trainer"] = [(t, 1, int((300 + t / 36) * MB)) for t in range(0, 3601, 15)]  # 100/h
    w.memory["dream"] = pts
    w.last_sample = 3600
    rep = w.memory_report()
    assert rep["trainer"]["slope_mb_per_h_last_40m"] == pytest.approx(100.0, abs=0.5)
    assert rep["trainer"]["slope_ok"] is False and rep["dream"]["slope_ok"] is True
    assert "(!)" in render(
        {
            "run": "r",
            "duration_s": 3600,
            "faults": [],
            "probe": dict.fromkeys(("sent", "acked", "found", "missing", "duplicates"), 0)
            | {"resent": 0, "rebuilds": 0},
            "topics": {},
            "memory": rep,
            "restarts": {},
            "checkpoints": {"first_version": 0, "last_version": 1, "longest_gap_s": 1},
            "progress": {},
        }
    )


def test_a_final_read_that_cannot_reach_the_broker_is_reported_not_raised() -> None:
    from kafka.errors import KafkaTimeoutError

    from infra.chaos import final_reads

    def gone() -> dict:
        raise KafkaTimeoutError("Unable to bootstrap from ['127.0.0.1:9092']")

    report = {"probe": {"missing": None}, "topics": {}, "read_errors": []}
    final_reads(report, gone, lambda: {"t": {"complete": True}})
    assert report["read_errors"] == [
        "probe read-back: KafkaTimeoutError: KafkaTimeoutError: Unable to bootstrap from "
        "['127.0.0.1:9092']"
    ]
    assert report["topics"] == {"t": {"complete": True}} and report["probe"]["missing"] is None
    final_reads(report, lambda: {"found": 3, "missing": []}, gone)
    assert report["probe"]["missing"] == 0 and len(report["read_errors"]) == 2
