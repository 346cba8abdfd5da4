"""Bulk delivery of the transition topics to the stream worker (Faust's fetch path, batched).

Faust hands every fetched record to its streams one at a time: per message a
``ConsumerMessage``, two asyncio tasks (``Service.wait_first(callback(msg),
suspend_flow.wait())``), the conductor's callback lookup under a lock, a queue
put and get and the stream's sensors. Profiling the worker showed that path,
not the worker's logic, capped it at ~3,000 transitions/s on two cores.

``BulkConsumer`` is Faust's aiokafka ``Consumer`` with one change in its fetch
loop (``_drain_messages``): the records of a partition of a *bulk* topic are
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
        bulk_topics = handler.bulk_topics
        on_records = handler.on_records
        chunk = max(1, int(getattr(handler, "bulk_max", 2000)))
        callback = self.callback
        consumer_should_stop = self._stopped.is_set
        fetcher_should_stop = fetcher._stopped.is_set
        get_read_offset = self._read_offset.__getitem__
        set_read_offset = self._read_offset.__setitem__
        set_flag, unset_flag = self.diag.set_flag, self.diag.unset_flag
        app = self.app
        try:
            while not (consumer_should_stop() or fetcher_should_stop()):
                set_flag(CONSUMER_FETCHING)
                records, active = await self._wait_next_records(1.0)
                await self.sleep(0)
                if records is None or self.should_stop:
                    unset_flag(CONSUMER_FETCHING)
                    continue
                if not self.flow_active:
                    # as Faust's getmany: fetched across a rebalance, seek back and drop them
                    try:
                        await self.perform_seek()
                    except Exception as ex:  # noqa: BLE001
                        log.warning("exception performing seek when flow not active: %s", ex)
                    unset_flag(CONSUMER_FETCHING)
                    continue
                if not records:
                    unset_flag(CONSUMER_FETCHING)
                    continue
                gen = app.consumer_generation_id
                delivered = 0  # records handed to the handler since its last after()
                for tp, recs in records.items():
                    if not recs or not self.flow_active or app.consumer_generation_id != gen:
                        continue
                    if (
                        active is not None
                        and tp not in active
                        and tp not in self._buffered_partitions
                    ):
                        continue
                    r_offset = get_read_offset(tp)
                    if r_offset is not None and recs[0].offset < r_offset:
                        recs = [r for r in recs if r.offset >= r_offset]
                        if not recs:
                            continue
                    if tp.topic in bulk_topics:
                        for i in range(0, len(recs), chunk):
                            if i and (not self.flow_active or app.consumer_generation_id != gen):
                                break
                            part = recs[i : i + chunk]
                            on_records(tp, part, gen)
                            set_read_offset(tp, part[-1].offset)
                            delivered += len(part)
                            if delivered >= chunk:  # bound the work between two outputs
                                delivered = 0
                                await handler.after()
                        continue
                    for rec in recs:  # any other topic: Faust's per-message path
                        if not self.flow_active or app.consumer_generation_id != gen:
                            break
                        await self.wait_first(
                            callback(self._to_message(tp, rec)), self.suspend_flow.wait()
                        )
                        set_read_offset(tp, rec.offset)
                if delivered:
                    await handler.after()
                unset_flag(CONSUMER_FETCHING)
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
            unset_flag(CONSUMER_FETCHING)


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
