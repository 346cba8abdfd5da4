"""Bulk delivery of the transition topics to the stream worker (Faust's fetch path, batched).

Faust hands every fetched record to its streams one at a time: per message a
``ConsumerMessage``, two asyncio tasks (``Service.wait_first(callback(msg),
suspend_flow.wait())``), the conductor's callback lookup under a lock, a queue
put and get and the stream's sensors. Profiling the worker showed that path,
not the worker's logic, capped it at ~3,000 transitions/s on two cores.

``BulkConsumer`` is Faust's aiokafka ``Consumer`` with one change in its fetch
loop (``_drain_messages``, run by ``_BulkDrain``): the records of a partition of a *bulk* topic are
handed, as the list aiokafka fetched, to a synchronous handler
(``handler.on_records(tp, records, generation_id)``); ``await
handler.after()`` (emit, hand the output to the producer) runs after every
``handler.bulk_max`` records and at the end of a fetch that had any. Records of every other topic take Faust's usual per-message path.
Everything else stays Faust's: the consumer group, subscriptions, rebalances
(``on_partitions_revoked/assigned``, flow stop/resume and the seek back to the
committed offsets), the consumer thread, commits. The bulk topics are declared
with ``acks=False`` (Faust never commits them; streams.agents commits the
offsets itself), so skipping Faust's ack bookkeeping for them loses nothing.

The rules of Faust's own loop are kept: nothing is delivered while the flow is
stopped (a rebalance; then the consumer seeks back to the committed offsets),
partitions that are not active are skipped, records below the partition's read
offset (already delivered before a seek) are dropped, and the generation id of
the assignment the records were fetched under is passed on, so a handler can
drop records of an earlier assignment.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Protocol

import faust
from faust.transport.consumer import CONSUMER_FETCHING
from faust.transport.drivers import aiokafka as drv

log = logging.getLogger(__name__)


class BulkHandler(Protocol):
    bulk_topics: frozenset[str]
    bulk_max: int  # at most this many records between two ``after()``

    def on_records(self, tp: Any, records: list, generation_id: int) -> None: ...

    async def after(self) -> None: ...


class BulkConsumer(drv.Consumer):
    """Faust's aiokafka consumer; records of ``app.bulk_handler.bulk_topics`` go to it in lists."""

    async def _drain_messages(self, fetcher) -> None:
        handler: BulkHandler | None = getattr(self.app, "bulk_handler", None)
        if handler is None:
            return await drv.Consumer._drain_messages(self, fetcher)
        drain = _BulkDrain(self, handler, fetcher)
        try:
            await drain.loop()
        except self.consumer_stopped_errors:
            if self.transport.app.should_stop:
                log.info("Broker stopped consumer, shutting down...")
                return
            raise
        except asyncio.CancelledError:
            if self.transport.app.should_stop:
                return
            raise
        except Exception:
            log.exception("bulk drain failed")
            raise
        finally:
            drain.unset_flag(CONSUMER_FETCHING)


class _BulkDrain:
    """The fetch loop of one ``BulkConsumer._drain_messages`` run: fetch, then deliver each
    partition's records (to the handler in chunks for a bulk topic, else one by one to Faust)."""

    def __init__(self, consumer: Any, handler: BulkHandler, fetcher: Any):
        self.consumer = consumer
        self.app = consumer.app
        self.handler = handler
        self.bulk_topics = handler.bulk_topics
        self.on_records = handler.on_records
        self.chunk = max(1, int(getattr(handler, "bulk_max", 2000)))
        self.callback = consumer.callback
        self.consumer_should_stop = consumer._stopped.is_set
        self.fetcher_should_stop = fetcher._stopped.is_set
        self.get_read_offset = consumer._read_offset.__getitem__
        self.set_read_offset = consumer._read_offset.__setitem__
        self.set_flag, self.unset_flag = consumer.diag.set_flag, consumer.diag.unset_flag
        self.delivered = 0  # records handed to the handler since its last after()

    async def loop(self) -> None:
        while not (self.consumer_should_stop() or self.fetcher_should_stop()):
            self.set_flag(CONSUMER_FETCHING)
            fetched = await self._fetch()
            if fetched is not None:
                await self._deliver(*fetched)
            self.unset_flag(CONSUMER_FETCHING)

    async def _fetch(self) -> tuple[dict, Any] | None:
        """(records by partition, active partitions) of the next fetch; None when it has nothing
        to deliver (none fetched, stopping, or fetched across a rebalance)."""
        c = self.consumer
        records, active = await c._wait_next_records(1.0)
        await c.sleep(0)
        if records is None or c.should_stop:
            return None
        if not c.flow_active:
            # as Faust's getmany: fetched across a rebalance, seek back and drop them
            try:
                await c.perform_seek()
            except Exception as ex:  # noqa: BLE001
                log.warning("exception performing seek when flow not active: %s", ex)
            return None
        if not records:
            return None
        return records, active

    def _current(self, gen: int) -> bool:
        """Whether records fetched under assignment ``gen`` may still be delivered."""
        return bool(self.consumer.flow_active) and self.app.consumer_generation_id == gen

    async def _deliver(self, records: dict, active: Any) -> None:
        gen = self.app.consumer_generation_id
        self.delivered = 0
        for tp, recs in records.items():
            recs = self._unread(tp, recs, active, gen)
            if not recs:
                continue
            if tp.topic in self.bulk_topics:
                await self._bulk(tp, recs, gen)
            else:
                await self._per_message(tp, recs, gen)
        if self.delivered:
            await self.handler.after()

    def _unread(self, tp: Any, recs: list, active: Any, gen: int) -> list:
        """The records of ``tp`` to deliver: none while the flow is stopped, after a new
        assignment or for a partition neither active nor buffered; none below its read offset."""
        if not recs or not self._current(gen):
            return []
        if active is not None and tp not in active and tp not in self.consumer._buffered_partitions:
            return []
        r_offset = self.get_read_offset(tp)
        if r_offset is not None and recs[0].offset < r_offset:
            recs = [r for r in recs if r.offset >= r_offset]
        return recs

    async def _bulk(self, tp: Any, recs: list, gen: int) -> None:
        """A bulk topic's records to the handler, ``chunk`` at a time, an ``after()`` whenever
        ``chunk`` records were delivered since the last one."""
        chunk = self.chunk
        for i in range(0, len(recs), chunk):
            if i and not self._current(gen):
                break
            part = recs[i : i + chunk]
            self.on_records(tp, part, gen)
            self.set_read_offset(tp, part[-1].offset)
            self.delivered += len(part)
            if self.delivered >= chunk:  # bound the work between two outputs
                self.delivered = 0
                await self.handler.after()

    async def _per_message(self, tp: Any, recs: list, gen: int) -> None:
        """Any other topic: Faust's per-message path."""
        c = self.consumer
        for rec in recs:
            if not self._current(gen):
                break
            await c.wait_first(self.callback(c._to_message(tp, rec)), c.suspend_flow.wait())
            self.set_read_offset(tp, rec.offset)


class App(faust.App):
    """``faust.App`` whose consumer is a ``BulkConsumer``; ``bulk_handler`` is set by
    streams.agents.register (None: every topic takes Faust's per-message path)."""

    bulk_handler: BulkHandler | None = None

    def _new_consumer(self):
        transport = self.transport
        return BulkConsumer(
            transport,
            callback=self.topics.on_message,
            loop=transport.loop,
            on_partitions_revoked=self._on_partitions_revoked,
            on_partitions_assigned=self._on_partitions_assigned,
            beacon=self.beacon,
        )
