"""The parts the trainer and the dream generator are wired from: small interfaces, one module.

``models.train.trainer.Trainer`` and ``models.dream.dreamer.Dreamer`` take these parts in their
constructors and open nothing there (no S3 client, no topic, consumer or producer); one builder
per command makes the real parts from the config (``models.train.run.build_trainer``,
``models.dream.run.build_dreamer``) and unit tests hand in fakes.  The real implementations:

- ``Publisher``: ``streams.kafka.Publisher`` (``make_publisher``);
- ``Consumer`` / ``ConsumerFactory``: a kafka-python ``KafkaConsumer`` (``streams.kafka.make_consumer``
  with the Kafka section bound), opened by the component's ``setup``, not its constructor;
- ``CheckpointSink``: ``models.checkpoints.writer.CheckpointWriter`` (uploads, ``LATEST``,
  announcements, retried through outages);
- ``Slot``: ``models.checkpoints.reader.ModelSlot`` (one model kind's loaded version);
- ``AnnouncementWatcher``: ``streams.checkpoints.CheckpointWatcher``.

Nothing here imports Kafka, S3 or torch: the interfaces say what a component asks of a part.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from models.lm.types import Tokenizer

if TYPE_CHECKING:
    from models.lm.base import LanguageModel


class Publisher(Protocol):
    """Sends records to topics; ``check`` raises once the broker has been gone too long."""

    def send(self, topic: str, rec: Any, key: str | None = None) -> Any: ...

    def check(self) -> None: ...

    def close(self) -> None: ...


class Consumer(Protocol):
    """A batch source: records of the partitions it is assigned, polled."""

    def poll(self, timeout_ms: int = 0, max_records: int | None = None) -> dict: ...

    def assign(self, partitions: list) -> None: ...

    def close(self) -> None: ...


ConsumerFactory = Callable[..., Any]
"""Opens a ``Consumer`` (keyword overrides such as ``max_poll_records``): called in ``setup``."""


class CheckpointSink(Protocol):
    """Where the trainer's checkpoints go: both kinds uploaded (``LATEST`` moved or not),
    announced, decided, pruned."""

    def latest(self, kind: str) -> dict | None: ...

    def upload(
        self,
        kind: str,
        version: int,
        local_dir: Path,
        config: dict,
        offsets: dict,
        extra: dict,
        set_latest: bool,
    ) -> Any: ...

    def announce(self, saved: Any) -> None: ...

    def write_decision(self, kind: str, version: int, record: dict[str, Any]) -> None: ...

    def flush(self) -> None: ...

    def prune(self, keep: int) -> None: ...


class Slot(Protocol):
    """One model kind's loaded version in a reader, hot-reloaded from ``LATEST``."""

    kind: str
    version: int | None
    model: LanguageModel | None
    tokenizer: Tokenizer | None
    extra: dict

    def refresh(self) -> bool: ...

    def poll(self) -> bool: ...

    def poll_due(self) -> bool: ...

    def known(self, version: int) -> bool: ...

    def install(self) -> bool: ...


class AnnouncementWatcher(Protocol):
    """Follows the checkpoint announcements on a thread of its own."""

    def start(self, timeout: float = 60.0) -> Any: ...

    def check(self) -> None: ...

    def stop(self, timeout: float = 5.0) -> None: ...
