"""models.checkpoints.reader.reader_workdir: where a reader downloads checkpoints (s3.reader_dir)."""

import os
import subprocess
import sys

import models.checkpoints.reader as R


def test_a_configured_folder_is_used(tmp_path):
    d = R.reader_workdir("dream", str(tmp_path / "dl"), ram=tmp_path / "no-ram")
    assert d.parent == tmp_path / "dl" and d.name.startswith(f"dynaweb-dream-{os.getpid()}-")


def test_ram_is_used_when_it_has_room_else_the_temp_dir(tmp_path, monkeypatch):
    ram = tmp_path / "shm"
    ram.mkdir()
    assert R.reader_workdir("dream", ram=ram).parent == ram
    monkeypatch.setattr(R, "RAM_MIN_FREE", 1 << 62)  # more than any disk: no room
    assert R.reader_workdir("dream", ram=ram).parent != ram
    assert R.reader_workdir("dream", ram=tmp_path / "missing").parent != tmp_path / "missing"


def test_folders_of_dead_readers_are_swept_and_live_ones_kept(tmp_path):
    ram = tmp_path / "shm"
    ram.mkdir()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    gone = ram / f"dynaweb-dream-{dead}-abc"
    (gone / "policy-3").mkdir(parents=True)
    live = ram / f"dynaweb-collector-policy-{os.getppid()}-xyz"
    live.mkdir()
    other = ram / "someone-else"
    other.mkdir()
    R.reader_workdir("dream", ram=ram)
    assert not gone.exists() and live.exists() and other.exists()
