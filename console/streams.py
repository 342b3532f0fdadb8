"""What the console shows of streams, read from the global metadata with the console's own
session: a namespace's streams with their counts, owner and write rate, and one stream's
segments, each with its ledger's ensembles placed by region and rack and audited against the
durability rule (I6).

Ledger metadata is read without a sync (a view may lag its region's ZooKeeper server by a
moment); at most READS_AT_ONCE single reads and BATCHES_AT_ONCE batches (MetaStore.get_many,
in chunks) are in flight. Completed segments and closed ledgers are
kept (at most SEGMENTS_CACHED_MAX and LEDGERS_CACHED_MAX, least recently shown dropped first)
and read again once older than FRESH_S: a truncation, an archive or a rebuild's new ensemble
shows within that; in-progress segments and open ledgers are read every time. A listing names at most
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
from global_meta.streams import ROOT, StreamCounters, StreamMetaStore, VersionedSegment
from ledger import (
    MIN_REGIONS_KEY,
    LedgerMetadataStore,
    LedgerState,
    VersionedMetadata,
)
from placement import LocatedBookie, audit_ensemble
from writer.admin import describe_segment

READS_AT_ONCE = 64
STREAMS_LISTED_MAX = 500
FILTER_CHARS_MAX = 200
RATES_KEPT = 10_000  # streams whose last count is kept for a write rate
AUDIT_NAMED_MAX = 50  # failing segments an audit names (all are counted)
BATCHES_AT_ONCE = 2  # batched reads in flight (each at most MetaStore's GET_MANY_CHUNK)
FRESH_S = 10.0  # a completed segment's or closed ledger's metadata is read again after this
SEGMENTS_CACHED_MAX = 50_000
LEDGERS_CACHED_MAX = 50_000
PUBLISHED_FOR_S = 5.0  # the published topology (bookie locations) is read again after this

T = TypeVar("T")


class StreamViews:
    def __init__(
        self,
        store: MetaStore,
        min_regions_default: int,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
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
        self._segments_cached = 0  # kept segments, a stream with none counted as one
        self._monotonic = monotonic  # cache ages: a wall clock stepped back must not keep them
        self._batches = asyncio.Semaphore(BATCHES_AT_ONCE)
        self._views: collections.OrderedDict[
            tuple[int, int], tuple[PublishedTopology, dict[str, Any]]
        ] = collections.OrderedDict()
        # completed segments and closed ledgers change rarely (truncation, archiving, a
        # rebuild's new ensemble): re-read once older than FRESH_S
        self._segment_cache: collections.OrderedDict[
            tuple[str, str], dict[str, tuple[float, VersionedSegment]]
        ] = collections.OrderedDict()
        self._ledger_cache: collections.OrderedDict[int, tuple[float, VersionedMetadata]] = (
            collections.OrderedDict()
        )

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
            (segments, _), counters, owner = await asyncio.gather(
                self._segments(streams, stream),
                self._bounded(streams.counters(stream)),
                self._bounded(streams.owner(stream)),
            )
        except Exception as err:  # noqa: BLE001 - deleted meanwhile, or malformed: one row says so
            return {"stream": stream, "error": f"{type(err).__name__}: {err}"}
        ledgers = (
            await self._metadata_of(
                [
                    v.segment.ledger_id
                    for v in segments
                    if not v.segment.ledger_deleted and not v.segment.is_in_progress
                ]
            )
        ).values()
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

    async def _metadata_of(self, ledger_ids: list[int]) -> dict[int, VersionedMetadata]:
        """Many ledgers' metadata: closed ones from the cache while fresh, the rest in one
        batch of reads."""
        now = self._monotonic()
        found: dict[int, VersionedMetadata] = {}
        wanted = []
        for ledger_id in ledger_ids:
            kept = self._ledger_cache.get(ledger_id)
            if kept is not None and now - kept[0] <= FRESH_S:
                self._ledger_cache.move_to_end(ledger_id)
                found[ledger_id] = kept[1]
            else:
                wanted.append(ledger_id)
        async with self._batches:
            batch = await self._ledgers.read_many(wanted)
        for ledger_id, read in zip(wanted, batch, strict=True):
            if read is None:
                self._ledger_cache.pop(ledger_id, None)
                continue
            found[ledger_id] = read
            if read.metadata.state is LedgerState.CLOSED:
                self._ledger_cache[ledger_id] = (now, read)
        while len(self._ledger_cache) > LEDGERS_CACHED_MAX:
            self._ledger_cache.popitem(last=False)
        return found

    async def _segments(
        self, streams: StreamMetaStore, stream: str, wanted: slice | None = None
    ) -> tuple[list[VersionedSegment], int]:
        """The stream's segments, oldest first (those of the `wanted` slice of the
        newest-first order; all when None), and how many it has: completed ones from the
        cache while fresh, the others read (in batches)."""
        try:
            names = await self._store.children(f"{streams.path(stream)}/segments")
        except NoNodeError as err:
            raise streams.not_found(stream) from err
        chosen = names if wanted is None else names[::-1][wanted]
        chosen_set = set(chosen)
        key = (streams.namespace, stream)
        kept = self._forget(key)
        now = self._monotonic()
        fresh: dict[str, tuple[float, VersionedSegment]] = {}
        stale: list[str] = []
        for name in names:
            held = kept.get(name)
            if name in chosen_set and (
                held is None or held[1].segment.is_in_progress or now - held[0] > FRESH_S
            ):
                stale.append(name)
            elif held is not None:
                fresh[name] = held
        async with self._batches:
            read = await streams.segments_named(stream, stale)
        fresh.update({n: (now, v) for n, v in zip(stale, read, strict=True) if v is not None})
        if len(fresh) <= SEGMENTS_CACHED_MAX:  # a stream larger than the cache is not kept
            self._segment_cache[key] = fresh
            self._segments_cached += max(1, len(fresh))
            while self._segments_cached > SEGMENTS_CACHED_MAX:
                self._forget(next(iter(self._segment_cache)))
        found = [fresh[name][1] for name in chosen if name in fresh]
        return sorted(found, key=lambda v: v.segment.sequence), len(names)

    def _forget(self, key: tuple[str, str]) -> dict[str, tuple[float, VersionedSegment]]:
        """Takes a stream's kept segments out of the cache (empty if none were kept)."""
        kept = self._segment_cache.pop(key, None)
        if kept is None:
            return {}
        self._segments_cached -= max(1, len(kept))
        return kept

    async def locations(self) -> PublishedTopology:
        now = self._monotonic()
        if self._published is None or now - self._published[0] > PUBLISHED_FOR_S:
            data, _ = await self._store.get(TOPOLOGY_ZNODE)
            self._published = (now, decode_published(data, TOPOLOGY_ZNODE))
        return self._published[1]

    async def counters(self, namespace: str, stream: str) -> StreamCounters:
        return await StreamMetaStore(self._store, namespace).counters(stream)

    async def stream(
        self, namespace: str, stream: str, rows: slice | None = None
    ) -> dict[str, Any]:
        """The segments of the `rows` slice of the newest-first order (all when None), each
        with its ledger's ensembles placed and audited, and how many segments there are.
        Every segment on a timeline is `timeline`'s; the audit of every ledger `audit`'s."""
        streams = StreamMetaStore(self._store, namespace)
        await streams.require(stream)
        (segments, total), counters, owner, published = await asyncio.gather(
            self._segments(streams, stream, rows), streams.counters(stream),
            streams.owner(stream), self.locations(),
        )  # fmt: skip
        chosen = segments[::-1]
        by_id = await self._metadata_of(
            [v.segment.ledger_id for v in chosen if not v.segment.ledger_deleted]
        )
        shown = []
        for versioned in chosen:
            entry = describe_segment(versioned.segment)
            metadata = by_id.get(versioned.segment.ledger_id)
            entry["ledger"] = None if metadata is None else self._ledger_view(metadata, published)
            shown.append(entry)
        return {
            "namespace": namespace,
            "stream": stream,
            "owner": owner,
            "records_completed": counters.next_seq,
            "max_txid": counters.max_txid,
            "segments_total": total,
            "rows": shown,
            "regions": list(published.regions),
        }

    async def timeline(self, namespace: str, stream: str) -> list[dict[str, Any]]:
        """Every segment, oldest first: what the timeline draws."""
        streams = StreamMetaStore(self._store, namespace)
        segments, _ = await self._segments(streams, stream)
        return [
            {
                "sequence": v.segment.sequence,
                "state": v.segment.state.value,
                "ledger_id": v.segment.ledger_id,
                "created_ms": v.segment.created_ms,
                "completed_ms": v.segment.completed_ms or None,
                "records": None if v.segment.is_in_progress else v.segment.record_count,
                "writer_region": v.segment.writer_region,
            }
            for v in segments
        ]

    async def audit(self, namespace: str, stream: str) -> dict[str, Any]:
        """The placement audit of every ensemble of every segment's ledger."""
        streams = StreamMetaStore(self._store, namespace)
        await streams.require(stream)
        (segments, _), published = await asyncio.gather(
            self._segments(streams, stream), self.locations()
        )
        by_id = await self._metadata_of(
            [v.segment.ledger_id for v in segments if not v.segment.ledger_deleted]
        )
        ensembles, failing = 0, []
        for versioned in segments:
            metadata = by_id.get(versioned.segment.ledger_id)
            if metadata is None:
                continue
            view = self._ledger_view(metadata, published)
            ensembles += len(view["ensembles"])
            bad = sum(e["adherence"] == "fail" for e in view["ensembles"])
            if bad:
                failing.append({"segment": versioned.segment.sequence, "ensembles": bad})
        return {
            "ledgers": len(by_id),
            "ensembles": ensembles,
            "ensembles_failing_rule": sum(f["ensembles"] for f in failing),
            "failing_segments": failing[:AUDIT_NAMED_MAX],
        }

    def _ledger_view(
        self, versioned: VersionedMetadata, published: PublishedTopology
    ) -> dict[str, Any]:
        """The ledger's ensembles placed and audited (kept per metadata version while the
        published bookie locations stay the same)."""
        key = (versioned.ledger_id, versioned.version)
        kept = self._views.get(key)
        if kept is not None and kept[0] == published:
            self._views.move_to_end(key)
            return kept[1]
        view = self._audited(versioned, published)
        self._views[key] = (published, view)
        while len(self._views) > LEDGERS_CACHED_MAX:
            self._views.popitem(last=False)
        return view

    def _audited(
        self, versioned: VersionedMetadata, published: PublishedTopology
    ) -> dict[str, Any]:
        located = [LocatedBookie(b.bookie_id, b.region, b.rack) for b in published.bookies]
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
