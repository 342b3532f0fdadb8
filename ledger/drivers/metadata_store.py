"""Ledger metadata in ZooKeeper, in BookKeeper's own layout: id allocation, create, read, CAS.

Ledgers written this way are ordinary ledgers to BookKeeper's tools and to the bookies'
garbage collector (a ledger missing from /ledgers is garbage to a bookie).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from core import errors
from core.background import Background
from global_meta import ANY_VERSION, MetaSession
from global_meta.store import Op
from ledger.codecs.metadata import (
    LEDGERS_ROOT,
    LedgerIdGenLayout,
    LedgerMetadata,
    hob_high_bits,
    ledger_id_from_path,
    ledger_path,
    long_ledger_id,
    parse_metadata,
    serialize_metadata,
    short_ledger_id,
)
from ledger.errors import (
    LedgerExistsError,
    LedgerIdOverflowError,
    LedgerMetadataConflictError,
    NoSuchLedgerMetadataError,
)

UNAVAILABLE_RETRY_S = 15.0  # a write retried through a lost ZooKeeper connection this long
BACKOFF_FIRST_S, BACKOFF_MAX_S = 0.05, 1.0
ID_ATTEMPTS_MAX = 8  # an id collides only if someone created that znode by hand
# Ledgers an operator-side walk (audits, rebuild checks, bookie listings) visits at once: over
# a WAN each visit is a ZooKeeper read or a few bookie round trips, so one at a time took
# minutes for a few hundred ledgers.
VISITS_AT_ONCE = 16
TIDY_WAIT_S = 1.0  # how long closing waits for the id nodes' deletes still under way

T = TypeVar("T")
log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class VersionedMetadata:
    ledger_id: int
    metadata: LedgerMetadata
    version: int


class LedgerMetadataStore:
    """BookKeeper-compatible ledger metadata over one metadata session."""

    def __init__(self, store: MetaSession, root: str = LEDGERS_ROOT) -> None:
        self._store = store
        self._root = root
        self._ids = LedgerIdGenLayout(root)
        # deletes of the id generator's nodes, not waited for (`_sequential_id`)
        self._tidying = Background()

    async def allocate_id(self) -> int:
        """A new ledger id from BookKeeper's generator scheme (short ids, then long ids)."""
        if await self._store.exists(self._ids.long_root) is None:
            try:
                return await self._sequential_id(self._ids.short_prefix, None)
            except LedgerIdOverflowError:
                await self._ensure(self._ids.long_root)
        return await self._long_id()

    async def _sequential_id(self, prefix: str, high_bits: int | None) -> int:
        created = await self._store.create(
            prefix, ephemeral=True, sequential=True, make_parents=True
        )
        # The id is the node's sequence number, known now: its delete is not waited for (a
        # ZooKeeper write across regions, in every new ledger's way). A node whose delete
        # fails is ephemeral, and goes with this session.
        self._tidying.run(self._delete_id_node(created), "deleting an id node")
        if high_bits is None:
            return short_ledger_id(created, prefix)
        return long_ledger_id(high_bits, created, prefix)

    async def _delete_id_node(self, path: str) -> None:
        try:
            await self._store.delete(path, version=ANY_VERSION)
        except errors.GlobelogError as err:
            log.info("id node %s left to its session's end: %s", path, err)

    async def close(self, timeout_s: float = TIDY_WAIT_S) -> None:
        """Waits (up to `timeout_s`) for the id nodes' deletes, then cancels what is left:
        the nodes are ephemeral, and go with the session the caller is closing."""
        await self._tidying.close(timeout_s)

    async def _long_id(self) -> int:
        for _ in range(ID_ATTEMPTS_MAX):
            children = await self._store.children(self._ids.long_root)
            high = max((h for c in children if (h := hob_high_bits(c)) is not None), default=0)
            if high == 0:
                high = 1
                await self._ensure(self._ids.hob_path(high))
            try:
                return await self._sequential_id(self._ids.long_prefix(high), high)
            except LedgerIdOverflowError:
                await self._ensure(self._ids.hob_path(high + 1))
        raise errors.MetadataError(f"no long ledger id after {ID_ATTEMPTS_MAX} attempts")

    async def _ensure(self, path: str) -> None:
        with contextlib.suppress(errors.NodeExistsError):
            await self._store.create(path, make_parents=True)

    async def create(self, metadata: LedgerMetadata) -> VersionedMetadata:
        """Allocates an id and writes the metadata znode; retries the rare id collision."""
        for _ in range(ID_ATTEMPTS_MAX):
            ledger_id = await self.allocate_id()
            try:
                await self.create_with_id(ledger_id, metadata)
            except LedgerExistsError:
                continue
            return VersionedMetadata(ledger_id, metadata, 0)
        raise errors.MetadataError(f"no free ledger id after {ID_ATTEMPTS_MAX} attempts")

    async def create_with_id(self, ledger_id: int, metadata: LedgerMetadata) -> None:
        path = ledger_path(ledger_id, self._root)
        try:
            await self._store.create(path, serialize_metadata(metadata), make_parents=True)
        except errors.NodeExistsError as err:
            raise LedgerExistsError(f"ledger {ledger_id} already exists at {path}") from err

    async def read(self, ledger_id: int, synced: bool = True) -> VersionedMetadata:
        """The ledger's latest metadata: synced first, since this client's ZooKeeper server
        (its region's) may not have seen a creation, an ensemble change or a close made
        through another region's server yet. `synced=False` skips that round trip to the
        leader, for views that may lag by what the region's server has not yet seen."""
        path = ledger_path(ledger_id, self._root)
        try:
            if synced:
                await self._store.sync(path)
            data, stat = await self._store.get(path)
        except errors.NoNodeError as err:
            raise NoSuchLedgerMetadataError(f"ledger {ledger_id}: no metadata at {path}") from err
        return VersionedMetadata(ledger_id, parse_metadata(data), stat.version)

    async def read_many(self, ledger_ids: Sequence[int]) -> list[VersionedMetadata | None]:
        """Many ledgers' metadata in one batch of reads, unsynced (`read(synced=False)`);
        None for a ledger without metadata."""
        found = await self._store.get_many([ledger_path(i, self._root) for i in ledger_ids])
        return [
            None if item is None else VersionedMetadata(i, parse_metadata(item[0]), item[1].version)
            for i, item in zip(ledger_ids, found, strict=True)
        ]

    async def write(
        self, current: VersionedMetadata, metadata: LedgerMetadata
    ) -> VersionedMetadata:
        """Compare-and-set from `current`; LedgerMetadataConflictError if it changed meanwhile.

        A lost ZooKeeper connection (a ZooKeeper node cut from its quorum, a client moving to
        another node) leaves a write's fate unknown: it is retried for UNAVAILABLE_RETRY_S,
        each time reading the node first, so a write that did land is recognised, not
        mistaken for a conflict.
        """
        path = ledger_path(current.ledger_id, self._root)
        data = serialize_metadata(metadata)
        deadline = asyncio.get_running_loop().time() + UNAVAILABLE_RETRY_S
        backoff = BACKOFF_FIRST_S
        while True:
            try:
                return await self._write_once(current, metadata, path, data)
            except errors.MetadataUnavailableError:
                if asyncio.get_running_loop().time() + backoff > deadline:
                    raise
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, BACKOFF_MAX_S)
            try:
                stored, stat = await self._store.get(path)
            except errors.MetadataUnavailableError:
                continue  # still away: try again until the deadline
            except errors.NoNodeError as err:
                raise NoSuchLedgerMetadataError(f"ledger {current.ledger_id}: deleted") from err
            if stat.version > current.version and stored == data:
                return VersionedMetadata(current.ledger_id, metadata, stat.version)  # it landed

    def write_op(self, current: VersionedMetadata, metadata: LedgerMetadata) -> Op:
        """`write`'s compare-and-set as one op of a caller's multi-op (`MetaStore.commit`)."""
        path = ledger_path(current.ledger_id, self._root)
        return Op("set", path, serialize_metadata(metadata), version=current.version)

    async def _write_once(
        self, current: VersionedMetadata, metadata: LedgerMetadata, path: str, data: bytes
    ) -> VersionedMetadata:
        try:
            stat = await self._store.set(path, data, version=current.version)
        except errors.BadVersionError as err:
            raise LedgerMetadataConflictError(
                f"ledger {current.ledger_id}: metadata changed since version {current.version}"
            ) from err
        except errors.NoNodeError as err:
            raise NoSuchLedgerMetadataError(f"ledger {current.ledger_id}: deleted") from err
        return VersionedMetadata(current.ledger_id, metadata, stat.version)

    async def ledger_ids(self) -> list[int]:
        """Every ledger's id, ascending: a walk of the hierarchical layout's levels (2-4-4
        digits for short ids, 3-4-4-4-4 for long ones; other children of the root, such as
        `available` or `underreplication`, are not ledgers)."""
        found: list[int] = []
        for top in await self._children(self._root):
            if not top.isdigit() or len(top) not in (2, 3):
                continue
            depth = 1 if len(top) == 2 else 3  # levels of four digits below the top one
            level = [f"{self._root}/{top}"]
            for _ in range(depth):
                level = [
                    f"{parent}/{name}"
                    for parent in level
                    for name in await self._children(parent)
                    if name.isdigit() and len(name) == 4
                ]
            for parent in level:
                for name in await self._children(parent):
                    if name.startswith("L") and name[1:].isdigit():
                        found.append(ledger_id_from_path(f"{parent}/{name}", self._root))
        return sorted(found)

    async def visit(
        self,
        visit: Callable[[VersionedMetadata], Awaitable[T]],
        ledger_ids: list[int] | None = None,
        at_once: int = VISITS_AT_ONCE,
    ) -> dict[int, T]:
        """`visit(metadata)` for every ledger (or those of `ledger_ids`), `at_once` at a
        time; what each returned, by ledger id. A ledger deleted before or during its visit
        (NoSuchLedgerMetadataError) is left out; any other failure stops the walk and is
        raised."""
        ids = await self.ledger_ids() if ledger_ids is None else ledger_ids
        pending = iter(ids)
        found: dict[int, T] = {}

        async def work() -> None:
            for ledger_id in pending:  # shared: each id is taken by one worker
                with contextlib.suppress(NoSuchLedgerMetadataError):
                    found[ledger_id] = await visit(await self.read(ledger_id))

        try:
            async with asyncio.TaskGroup() as workers:
                for _ in range(min(at_once, len(ids))):
                    workers.create_task(work())
        except ExceptionGroup as failed:  # the first failure, as a sequential walk raises it
            raise failed.exceptions[0] from None
        return {ledger_id: found[ledger_id] for ledger_id in ids if ledger_id in found}

    async def _children(self, path: str) -> list[str]:
        try:
            return await self._store.children(path)
        except errors.NoNodeError:
            return []  # removed meanwhile (the last ledger of a level deleted)

    async def delete(self, ledger_id: int, version: int = ANY_VERSION) -> None:
        path = ledger_path(ledger_id, self._root)
        try:
            await self._store.delete(path, version=version)
        except errors.NoNodeError as err:
            raise NoSuchLedgerMetadataError(f"ledger {ledger_id}: no metadata at {path}") from err
