"""What the console shows of streams, read from the global metadata with the console's own
session: a namespace's streams with their counts, owner and write rate, and one stream's
segments, each with its ledger's ensembles placed by region and rack and audited against the
durability rule (I6).

Ledger metadata is read without a sync (a view may lag its region's ZooKeeper server by a
moment); at most READS_AT_ONCE reads are in flight. A listing names at most
STREAMS_LISTED_MAX streams (those whose names contain the filter, in name order).
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from core.errors import BadRequestError, NoNodeError
from core.routes import TOPOLOGY_ZNODE, PublishedTopology, decode_published
from core.security.tokens import Token
from global_meta import MetaStore
from global_meta.streams import ROOT, StreamCounters, StreamMetaStore
from ledger import (
    MIN_REGIONS_KEY,
    LedgerMetadataStore,
    LedgerState,
    NoSuchLedgerMetadataError,
    VersionedMetadata,
)
from placement import LocatedBookie, audit_ensemble
from writer.admin import describe_segment

READS_AT_ONCE = 64
STREAMS_LISTED_MAX = 500
FILTER_CHARS_MAX = 200
RATES_KEPT = 10_000  # streams whose last count is kept for a write rate
PUBLISHED_FOR_S = 5.0  # the published topology (bookie locations) is read again after this

T = TypeVar("T")


class StreamViews:
    def __init__(
        self, store: MetaStore, min_regions_default: int, clock: Callable[[], float] = time.time
    ) -> None:
        self._store = store
        self._ledgers = LedgerMetadataStore(store)
        self._min_regions = min_regions_default
        self._clock = clock
        self._slots = asyncio.Semaphore(READS_AT_ONCE)
        self._seen: collections.OrderedDict[tuple[str, str], tuple[float, int]] = (
            collections.OrderedDict()
        )
        self._published: tuple[float, PublishedTopology] | None = None

    async def _bounded(self, work: Awaitable[T]) -> T:
        async with self._slots:
            return await work

    async def namespaces(self, token: Token) -> list[str]:
        try:
            names = await self._store.children(ROOT)
        except NoNodeError:  # no stream made yet
            return []
        return sorted(n for n in names if token.scope.allows("read", n))

    async def list_streams(self, token: Token, namespace: str, contains: str) -> dict[str, Any]:
        """The namespace's streams the token may read, with their counts (newest first)."""
        if len(contains) > FILTER_CHARS_MAX:
            raise BadRequestError(
                f"filter of {len(contains)} characters; at most {FILTER_CHARS_MAX}"
            )
        token.require("read", namespace)
        streams = StreamMetaStore(self._store, namespace)
        names = sorted(
            s
            for s in await streams.list_streams()
            if contains in s and token.scope.allows("read", namespace, s)
        )
        shown = names[:STREAMS_LISTED_MAX]
        rows = await asyncio.gather(*(self._row(streams, s) for s in shown))
        return {
            "namespace": namespace,
            "filter": contains,
            "matching": len(names),
            "shown": len(shown),
            "streams": [r for r in rows if r is not None],
        }

    async def _row(self, streams: StreamMetaStore, stream: str) -> dict[str, Any] | None:
        try:
            segments, counters, owner = await asyncio.gather(
                self._bounded(streams.segments(stream)),
                self._bounded(streams.counters(stream)),
                self._bounded(streams.owner(stream)),
            )
        except Exception as err:  # noqa: BLE001 - deleted meanwhile, or malformed: one row says so
            return {"stream": stream, "error": f"{type(err).__name__}: {err}"}
        ledgers = await asyncio.gather(
            *(
                self._metadata(v.segment.ledger_id)
                for v in segments
                if not v.segment.ledger_deleted and not v.segment.is_in_progress
            )
        )
        records = counters.next_seq
        now = self._clock()
        key = (streams.namespace, stream)
        before = self._seen.pop(key, None)
        self._seen[key] = (now, records)
        if len(self._seen) > RATES_KEPT:
            self._seen.popitem(last=False)
        rate = None
        if before is not None and now > before[0]:
            rate = round((records - before[1]) / (now - before[0]), 1)
        return {
            "stream": stream,
            "records_completed": records,
            "bytes_completed": sum(m.metadata.length for m in ledgers if m is not None),
            "segments": len(segments),
            "in_progress": sum(v.segment.is_in_progress for v in segments),
            "owner": owner,
            "owner_region": None if owner is None else owner.rpartition("@")[2],
            "writes_per_s": rate,
            "last_write_region": segments[-1].segment.writer_region if segments else None,
        }

    async def _metadata(self, ledger_id: int) -> VersionedMetadata | None:
        try:
            return await self._bounded(self._ledgers.read(ledger_id, synced=False))
        except NoSuchLedgerMetadataError:
            return None

    async def locations(self) -> PublishedTopology:
        now = self._clock()
        if self._published is None or now - self._published[0] > PUBLISHED_FOR_S:
            data, _ = await self._store.get(TOPOLOGY_ZNODE)
            self._published = (now, decode_published(data, TOPOLOGY_ZNODE))
        return self._published[1]

    async def counters(self, namespace: str, stream: str) -> StreamCounters:
        return await StreamMetaStore(self._store, namespace).counters(stream)

    async def stream(self, namespace: str, stream: str) -> dict[str, Any]:
        """Every segment of the stream with its ledger's ensembles, placed and audited."""
        streams = StreamMetaStore(self._store, namespace)
        await streams.require(stream)
        segments, counters, owner, published = await asyncio.gather(
            streams.segments(stream), streams.counters(stream), streams.owner(stream),
            self.locations(),
        )  # fmt: skip
        located = [LocatedBookie(b.bookie_id, b.region, b.rack) for b in published.bookies]
        ledgers = await asyncio.gather(
            *(self._metadata(v.segment.ledger_id) for v in segments if not v.segment.ledger_deleted)
        )
        by_id = {m.ledger_id: m for m in ledgers if m is not None}
        described = []
        failing = 0
        for versioned in segments:
            segment = versioned.segment
            entry = describe_segment(segment)
            metadata = by_id.get(segment.ledger_id)
            entry["ledger"] = (
                None if metadata is None else self._ledger_view(metadata, located, published)
            )
            if metadata is not None:
                failing += sum(e["adherence"] == "fail" for e in entry["ledger"]["ensembles"])
            described.append(entry)
        return {
            "namespace": namespace,
            "stream": stream,
            "owner": owner,
            "records_completed": counters.next_seq,
            "max_txid": counters.max_txid,
            "segments": described,
            "ensembles_failing_rule": failing,
            "regions": list(published.regions),
        }

    def _ledger_view(
        self,
        versioned: VersionedMetadata,
        located: list[LocatedBookie],
        published: PublishedTopology,
    ) -> dict[str, Any]:
        md = versioned.metadata
        stored = dict(md.custom_metadata).get(MIN_REGIONS_KEY)
        min_regions = int(stored.decode()) if stored else self._min_regions
        ensembles = []
        for ensemble in md.ensembles:
            report = audit_ensemble(
                ensemble.bookies, located, md.write_quorum, md.ack_quorum, min_regions
            )
            places = []
            for bookie_id in ensemble.bookies:
                where = published.location(bookie_id)
                places.append(
                    {
                        "bookie": bookie_id,
                        "name": where.name if where else None,
                        "region": where.region if where else None,
                        "rack": where.rack if where else None,
                    }
                )
            ensembles.append(
                {
                    "first_entry_id": ensemble.first_entry_id,
                    "bookies": places,
                    "adherence": report.adherence.value,
                    "audit": report.describe(),
                }
            )
        return {
            "ledger_id": versioned.ledger_id,
            "state": md.state.name,
            "closed": md.state is LedgerState.CLOSED,
            "length": md.length,
            "last_entry_id": md.last_entry_id,
            "quorum": f"{md.ensemble_size}/{md.write_quorum}/{md.ack_quorum}",
            "min_regions_for_durability": min_regions,
            "ensembles": ensembles,
        }
