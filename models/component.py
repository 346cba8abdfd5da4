"""Shut-down shared by the long-running model components (trainer, dream generator).

Start-up is ``core.process.start_component``.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any


def close_component(consumer: Any, pub: Any, work: Path) -> None:
    """Close the Kafka consumer (None: setup failed before opening it), then the publisher, then
    remove the work directory; the publisher is closed even if the consumer's close fails."""
    try:
        if consumer is not None:
            consumer.close()
    finally:
        pub.close()
        shutil.rmtree(work, ignore_errors=True)
