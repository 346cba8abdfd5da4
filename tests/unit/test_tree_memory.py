"""Every component's metrics endpoint reports the resident memory of its process tree
(``core.metrics.TreeMemory``: ``dynaweb_process_tree_resident_bytes``), children included."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from prometheus_client import CollectorRegistry

from core.metrics import register_tree_memory
from core.proctree import tree_rss

pytestmark = pytest.mark.unit

NAME = "dynaweb_process_tree_resident_bytes"


def test_the_tree_memory_counts_a_child_and_is_registered_once() -> None:
    reg = CollectorRegistry()
    register_tree_memory(reg)
    register_tree_memory(reg)  # a second endpoint in the process: no duplicate
    alone = reg.get_sample_value(NAME)
    assert alone and alone > 10 * 2**20
    child = subprocess.Popen(
        [sys.executable, "-c", "b = b'x' * (96 * 2**20); import time; time.sleep(60)"]
    )
    try:
        deadline = time.time() + 20
        while time.time() < deadline and tree_rss(os.getpid()) - alone < 80 * 2**20:
            time.sleep(0.2)
        fresh = CollectorRegistry()
        register_tree_memory(fresh)
        assert fresh.get_sample_value(NAME) - alone > 80 * 2**20
        assert reg.get_sample_value(NAME) == alone  # read at most every 10 s
    finally:
        child.kill()
        child.wait()
