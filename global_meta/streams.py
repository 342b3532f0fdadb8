"""Stream metadata in ZooKeeper: streams, their segment lists, max txid and owner lock.

The layout (docs/metadata.md), under /globelog/namespaces/<namespace>/streams/<stream>:
    (stream znode)          JSON {"version": 1, "created_ms": ...}
    segments                data: the highest segment sequence number allocated (decimal)
    segments/<%018d seq>    one segment's metadata (core.segments, JSON)
    counters                JSON {"max_txid": ..., "next_seq": ...}: the highest txid of any
                            completed segment (-1: none) and the sequence id after its last
                            record; they outlive the segments retention deletes
    lock/owner-<%010d>      ephemeral sequential; the lowest one owns the stream; data JSON
                            {"owner": ..., "region": ...}

Every update is a compare-and-set on the version read before it; starting a segment is one
multi-op that also checks the caller's own lock node, so an owner whose session ended (and
whose lock went with it) can never add a segment: that is the epoch a fenced owner cannot
address.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import secrets
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from core import runtime
from core.errors import (
    MetadataUnavailableError,
    NodeExistsError,
    NoNodeError,
    OwnershipError,
    SegmentMetadataError,
    SessionExpiredError,
    StreamExistsError,
    StreamNotFoundError,
)
from core.segments import SegmentMetadata, decode_segment, encode_segment
from core.streams import check_name
from global_meta.session import MetaSession
from global_meta.store import Op

ROOT = "/globelog/namespaces"
STREAM_FORMAT_VERSION = 1
LOCK_PREFIX = "owner-"
HOLDER_READS_MAX = 5  # reads of a stream's lock queue, each losing its lowest node meanwhile
# A read through the reads session (`StreamMetaStore.read_unordered`) is waited for this long,
# then made through the main one: that session may be away while the main one serves.
UNORDERED_WAIT_S = 1.0
T = TypeVar("T")
log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class VersionedSegment:
    segment: SegmentMetadata
    version: int  # the znode version: the compare-and-set token


@dataclass(frozen=True, slots=True)
class OwnerLock:
    """A held ownership lock: its znode path (the multi-op check) and who holds it."""

    path: str
    owner: str


@dataclass(frozen=True, slots=True)
class LockHolder:
    """The lock node that owns a stream: its path, who made it ("owner@region") and the
    ZooKeeper session that holds it."""

    path: str
    owner: str
    session: int


@dataclass(frozen=True, slots=True)
class StreamCounters:
    """The allocation counters a new segment is created against (with their versions)."""

    max_sequence: int
    sequence_version: int
    max_txid: int
    next_seq: int  # the sequence id of the record after the last completed segment
    counters_version: int

    def after(self, completed: SegmentMetadata) -> StreamCounters:
        """The counters once `completed` is written: past its records and txids."""
        return dataclasses.replace(
            self,
            max_txid=max(self.max_txid, completed.last_txid),
            next_seq=max(self.next_seq, completed.next_seq),
        )


class StreamMetaStore:
    """One namespace's stream metadata. Every method raises core.errors classes."""

    def __init__(
        self, store: MetaSession, namespace: str, reads: MetaSession | None = None
    ) -> None:
        """`reads`: a session of this process's that nothing writes through, for the reads
        that may be stale (`unordered`); None: `store`'s."""
        self.store = store
        self.namespace = check_name(namespace, "namespace")
        self.root = f"{ROOT}/{namespace}/streams"
        # A session orders its requests: a read behind this process's writes (another take's
        # lock and segment under way, each a round trip to ZooKeeper's leader across the WAN)
        # waits for them. Reads that may be stale go through a session of their own.
        self.unordered: StreamMetaStore = (
            self if reads is None or reads is store else StreamMetaStore(reads, namespace)
        )

    def path(self, stream: str) -> str:
        return f"{self.root}/{check_name(stream)}"

    async def read_unordered(self, read: Callable[[StreamMetaStore], Awaitable[T]]) -> T:
        """`read` of a view that may be stale, through the reads session (`unordered`), not
        queued behind this process's writes; through the main session when the reads one
        fails or takes over UNORDERED_WAIT_S."""
        if self.unordered is self:
            return await read(self)
        try:
            async with asyncio.timeout(UNORDERED_WAIT_S):
                return await read(self.unordered)
        except (TimeoutError, MetadataUnavailableError, SessionExpiredError) as err:
            log.info("a read through the reads session failed, made through the main: %r", err)
        return await read(self)

    def segment_path(self, stream: str, sequence: int) -> str:
        return f"{self.path(stream)}/segments/{sequence:018d}"

    # ------------------------------------------------------------------------ streams

    async def create_stream(self, stream: str) -> None:
        path = self.path(stream)
        await self.store.ensure_path(self.root)
        body = {"version": STREAM_FORMAT_VERSION, "created_ms": runtime.wall_ms()}
        try:
            await self.store.commit(
                [
                    Op("create", path, json.dumps(body).encode()),
                    Op("create", f"{path}/segments", b"0"),
                    Op("create", f"{path}/counters", _counters(-1, 0)),
                    Op("create", f"{path}/lock"),
                ]
            )
        except NodeExistsError as err:
            raise StreamExistsError(
                f"stream {stream!r} already exists in namespace {self.namespace!r}"
            ) from err

    async def exists(self, stream: str) -> bool:
        return await self.store.exists(self.path(stream)) is not None

    async def require(self, stream: str) -> None:
        """Raises StreamNotFoundError unless the stream exists. A miss is checked again after
        a sync: a stream just created through another region's ZooKeeper server may not have
        reached this client's server yet, and "does not exist" must be definitive."""
        if await self.exists(stream):
            return
        await self.store.sync(self.path(stream))
        if not await self.exists(stream):
            raise self.not_found(stream)

    def not_found(self, stream: str) -> StreamNotFoundError:
        return StreamNotFoundError(
            f"stream {stream!r} does not exist in namespace {self.namespace!r}"
        )

    async def list_streams(self) -> list[str]:
        if await self.store.exists(self.root) is None:
            return []
        return await self.store.children(self.root)

    async def created_ms(self, stream: str) -> int:
        try:
            data, _ = await self.store.get(self.path(stream))
        except NoNodeError as err:
            raise self.not_found(stream) from err
        try:
            return int(json.loads(data)["created_ms"])
        except (ValueError, KeyError, TypeError):
            return 0

    async def delete_stream_metadata(self, stream: str) -> None:
        """Removes the stream's whole tree (the caller deletes the ledgers first)."""
        try:
            await self.store.delete(self.path(stream), version=-1, recursive=True)
        except NoNodeError as err:
            raise self.not_found(stream) from err

    # ------------------------------------------------------------------------ segments

    async def segments(self, stream: str) -> list[VersionedSegment]:
        """Every segment of the stream, oldest first."""
        try:
            names = await self.store.children(f"{self.path(stream)}/segments")
        except NoNodeError as err:
            raise self.not_found(stream) from err
        found = await asyncio.gather(*(self._segment(stream, n) for n in names))
        return sorted((s for s in found if s is not None), key=lambda v: v.segment.sequence)

    async def segments_named(
        self, stream: str, names: Sequence[str]
    ) -> list[VersionedSegment | None]:
        """The segments of these znode names in one batch of reads (None: deleted)."""
        base = f"{self.path(stream)}/segments"
        found = await self.store.get_many([f"{base}/{name}" for name in names])
        read: list[VersionedSegment | None] = []
        for name, item in zip(names, found, strict=True):
            if item is None:
                read.append(None)
                continue
            segment = decode_segment(item[0], f"{base}/{name}")
            if f"{segment.sequence:018d}" != name:
                raise SegmentMetadataError(f"{base}/{name}: holds segment {segment.sequence}")
            read.append(VersionedSegment(segment, item[1].version))
        return read

    async def segment(self, stream: str, sequence: int) -> VersionedSegment | None:
        """One segment's metadata, or None when it does not exist (not yet, or deleted)."""
        return await self._segment(stream, f"{sequence:018d}")

    async def _segment(self, stream: str, name: str) -> VersionedSegment | None:
        path = f"{self.path(stream)}/segments/{name}"
        try:
            data, stat = await self.store.get(path)
        except NoNodeError:
            return None  # deleted by retention between the listing and the read
        segment = decode_segment(data, path)
        if f"{segment.sequence:018d}" != name:
            raise SegmentMetadataError(f"{path}: holds segment {segment.sequence}")
        return VersionedSegment(segment, stat.version)

    async def watch_segments(self, stream: str) -> AsyncGenerator[list[str], None]:
        """Yields the segment znode names now and after each change (values coalesce);
        StreamNotFoundError once the stream is deleted (its segment list goes with it)."""
        path = f"{self.path(stream)}/segments"
        try:
            async with contextlib.aclosing(self.store.watch_children(path)) as names_now:
                async for names in names_now:
                    yield names
        except NoNodeError as err:
            raise self.not_found(stream) from err

    async def counters(self, stream: str) -> StreamCounters:
        path = self.path(stream)
        try:
            seq_data, seq_stat = await self.store.get(f"{path}/segments")
            data, stat = await self.store.get(f"{path}/counters")
        except NoNodeError as err:
            raise self.not_found(stream) from err
        try:
            body = json.loads(data)
            return StreamCounters(
                int(seq_data), seq_stat.version, int(body["max_txid"]), int(body["next_seq"]),
                stat.version,
            )  # fmt: skip
        except (ValueError, KeyError, TypeError) as err:
            raise SegmentMetadataError(f"{path}: counters are malformed: {err}") from err

    async def start_segment(
        self,
        stream: str,
        segment: SegmentMetadata,
        counters: StreamCounters,
        lock: OwnerLock,
        completing: tuple[VersionedSegment, SegmentMetadata] | None = None,
        also: Sequence[Op] = (),
    ) -> VersionedSegment:
        """Creates the in-progress segment, allocating its sequence, while `lock` is held.
        With `completing` (the last segment and its completed metadata), completes that one
        in the same multi-op: one ZooKeeper write, not two, between an owner's recovery (or a
        roll's close) and its first write. `counters` are as read before that completion; `also`: more ops of the same
        multi-op (a recovered ledger's close)."""
        assert segment.sequence == counters.max_sequence + 1, (segment, counters)
        path = self.path(stream)
        ops = [Op("check", lock.path, version=0), *also]
        if completing is not None:
            ops += self._completion(stream, *completing, counters)
        else:
            # The new segment's first sequence id and txid come from `counters`: they must be
            # the stream's current ones. A view read in pieces (the counters before the last
            # owner completed its segment, the segment after) would hand ids out twice.
            ops.append(Op("check", f"{path}/counters", version=counters.counters_version))
        ops += [
            Op("set", f"{path}/segments", str(segment.sequence).encode(),
               version=counters.sequence_version),
            Op("create", self.segment_path(stream, segment.sequence), encode_segment(segment)),
        ]  # fmt: skip
        await self.store.commit(ops)
        return VersionedSegment(segment, 0)

    async def complete_segment(
        self,
        stream: str,
        old: VersionedSegment,
        new: SegmentMetadata,
        lock: OwnerLock | None,
        also: Sequence[Op] = (),
    ) -> VersionedSegment:
        """Completes a segment: rewrites it and moves the counters past its records (with
        `also` in the same multi-op)."""
        counters = await self.counters(stream)
        ops = [*also] if lock is None else [Op("check", lock.path, version=0), *also]
        await self.store.commit(ops + self._completion(stream, old, new, counters))
        return VersionedSegment(new, old.version + 1)

    def _completion(
        self, stream: str, old: VersionedSegment, new: SegmentMetadata, counters: StreamCounters
    ) -> list[Op]:
        """The ops that complete `old` as `new` and move `counters` past it."""
        moved = counters.after(new)
        return [
            Op("set", self.segment_path(stream, new.sequence), encode_segment(new),
               version=old.version),
            Op("set", f"{self.path(stream)}/counters", _counters(moved.max_txid, moved.next_seq),
               version=counters.counters_version),
        ]  # fmt: skip

    async def update_segment(
        self, stream: str, old: VersionedSegment, new: SegmentMetadata
    ) -> VersionedSegment:
        """Compare-and-set of one segment's metadata (truncation marks)."""
        stat = await self.store.set(
            self.segment_path(stream, new.sequence), encode_segment(new), version=old.version
        )
        return VersionedSegment(new, stat.version)

    async def delete_segment(self, stream: str, old: VersionedSegment) -> None:
        await self.store.delete(
            self.segment_path(stream, old.segment.sequence), version=old.version
        )

    # --------------------------------------------------------------------------- owner

    async def acquire(
        self,
        stream: str,
        owner: str,
        region: str,
        timeout_s: float,
        waits_for: str | None = None,
    ) -> OwnerLock:
        """Takes the stream's ownership lock, waiting up to `timeout_s` for the current owner
        to go; OwnershipError naming the owner otherwise. `waits_for`: the owner
        ("name@region") whose going this waits for; when another writer takes the lock in
        its place, the wait ends at once (OwnershipError naming that writer) rather than
        queueing behind a live owner for the rest of `timeout_s`. A missing stream fails the
        lock node's create (a stream is made with its lock directory, in one multi-op), so it
        is not looked up first: one read less before the queue."""
        lock_dir = f"{self.path(stream)}/lock"
        # the token tells this take's node from a node of the same name in an earlier
        # incarnation of the stream's lock directory (deleted and made again), which a stale
        # view may still show
        token = secrets.token_hex(8)
        body = json.dumps({"owner": owner, "region": region, "token": token}).encode()
        try:
            mine = await self.store.create(
                f"{lock_dir}/{LOCK_PREFIX}", body, ephemeral=True, sequential=True
            )
        except NoNodeError as err:
            raise self.not_found(stream) from err
        name = mine.rsplit("/", 1)[1]
        queued_at = runtime.monotonic()
        try:
            if timeout_s > 0:
                async with asyncio.timeout(timeout_s):
                    won = await self._wait_lowest(lock_dir, name, token, waits_for)
            else:
                won = _lowest(await self.store.children(lock_dir)) == name
        except TimeoutError:
            won = False
        except NoNodeError as err:  # the lock directory went: the stream was deleted
            await self._release_path(mine)
            raise self.not_found(stream) from err
        except BaseException:
            await self._release_path(mine)
            raise
        if not won:
            await self._release_path(mine)
            holder = await self.owner(stream)
            queued_s = runtime.monotonic() - queued_at
            waited = f" (queued {queued_s:.1f} s of {timeout_s} s)" if timeout_s > 0 else ""
            raise OwnershipError(
                f"stream {stream!r} is owned by {holder or 'another writer'}{waited}; "
                "one writer owns a stream at a time",
                holder or "",
            )
        return OwnerLock(mine, owner)

    async def _wait_lowest(
        self, lock_dir: str, name: str, token: str, waits_for: str | None
    ) -> bool:
        """True once `name` is the lowest lock node; False if it vanished (session ended),
        or if the lowest is the node of another owner than `waits_for` (when given).

        Watched through the reads session too, which says it first when this session is busy
        with other takes' writes (each read of this session waits for them): a view that
        holds this take's node (its name and `token`) as its lowest is never wrong, however
        stale (the nodes below it were made before it, and a node's end is for ever). Only
        this session's view says the rest (vanished, another owner first), and it wins when
        both have answered."""
        main = asyncio.ensure_future(self._watch_lowest(lock_dir, name, waits_for))
        if self.unordered is self:
            return await main
        early = asyncio.ensure_future(self.unordered._lowest_seen(lock_dir, name, token))
        try:
            await asyncio.wait({main, early}, return_when=asyncio.FIRST_COMPLETED)
            seen = early.done() and not early.cancelled() and early.exception() is None
            if not main.done() and seen and early.result():
                return True  # (else the reads session had no view: this one's says)
            return await main
        finally:
            for task in (main, early):
                task.cancel()
            await asyncio.wait({main, early})
            for task in (main, early):
                if not task.cancelled():
                    task.exception()  # retrieved: the answer is the one returned or raised

    async def _lowest_seen(self, lock_dir: str, name: str, token: str) -> bool:
        """True once this session's view of the queue shows the node `name` holding `token`
        as its lowest; False when the view cannot be had (a reads session away, the
        directory gone)."""
        try:
            async for names in self.store.watch_children(lock_dir):
                if names and _lowest(names) == name:
                    data, _ = await self.store.get(f"{lock_dir}/{name}")
                    if _lock_token(data) == token:
                        return True
        except (MetadataUnavailableError, SessionExpiredError, NoNodeError) as err:
            log.info("the reads session's watch of %s ended: %r", lock_dir, err)
        return False

    async def _watch_lowest(self, lock_dir: str, name: str, waits_for: str | None) -> bool:
        checked = None  # the lowest node whose owner was read last
        async for names in self.store.watch_children(lock_dir):
            if name not in names:
                return False
            lowest = _lowest(names)
            if lowest == name:
                return True
            if waits_for is not None and lowest != checked:
                checked = lowest
                try:
                    data, _ = await self.store.get(f"{lock_dir}/{lowest}")
                except NoNodeError:
                    continue  # gone already: the next change says who is lowest now
                except MetadataUnavailableError:
                    checked = None  # asked again at the next change; queued on meanwhile
                    continue
                if _lock_owner(data) != waits_for:
                    return False  # another writer took it: queueing on would wait on a live one
        return False

    async def owner(self, stream: str, synced: bool = True) -> str | None:
        """Who holds the lock now ("owner@region"), or None. Synced first: a lock released
        through another region's ZooKeeper server is not reported as still held (unless
        `synced` is False: this server's view, a WAN round trip sooner)."""
        if synced:
            try:
                await self.store.sync(f"{self.path(stream)}/lock")
            except NoNodeError:
                return None
        holder = await self.holder(stream)
        return None if holder is None else holder.owner

    async def release(self, lock: OwnerLock) -> None:
        await self._release_path(lock.path)

    async def release_orphans(self, stream: str, owner: str, *, unordered: bool = False) -> int:
        """Deletes the stream's lock nodes of `owner` ("name@region") that this store's own
        ZooKeeper session holds, and returns how many: called by an owner that holds no lock
        of the stream, they are orphans (a lock created while the connection dropped, its
        answer lost, and created again). They would otherwise stand as the lowest node for
        the whole life of the session: a stream nobody can take. `unordered`: found through
        the reads session (`read_unordered`), where in this session the reads would wait for
        the writes under way (other takes'); an orphan too fresh for that session's server
        to show yet is found by the next ordered call (a proxy's look for the owner makes
        one when it finds its own lock)."""
        session = self.store.session_id
        if session is None:
            return 0
        return await self._delete_locks(stream, owner, session, unordered)

    async def holder(self, stream: str) -> LockHolder | None:
        """The lock node that owns the stream now, as this store's server has it (unsynced),
        or None when nobody holds the lock (or the stream is gone). An owner that goes while
        it is read leaves the stream to the next in line, which is read in turn."""
        lock_dir = f"{self.path(stream)}/lock"
        for _ in range(HOLDER_READS_MAX):
            try:
                lowest = _lowest(await self.store.children(lock_dir))
            except NoNodeError:
                return None  # the stream is gone
            if lowest is None:
                return None
            try:
                data, stat = await self.store.get(f"{lock_dir}/{lowest}")
            except NoNodeError:
                continue  # that owner went between the two reads: the next in line owns it
            return LockHolder(f"{lock_dir}/{lowest}", _lock_owner(data), stat.ephemeral_owner)
        raise OwnershipError(
            f"stream {stream!r}: its owner changed {HOLDER_READS_MAX} times while it was read"
        )

    async def break_lock(self, holder: LockHolder) -> bool:
        """Deletes that one lock node, whichever session holds it; False when it was gone
        already. For an owner found gone (nothing listens at its address any more) whose
        session ZooKeeper has not ended yet. Were it still running it would acknowledge
        nothing more: every segment write of its checks its lock node, the next owner's
        recovery fences its ledger, and its writer, watching the node, fails at once."""
        try:
            await self.store.delete(holder.path, version=-1)
        except NoNodeError:
            return False
        return True

    async def _delete_locks(self, stream: str, owner: str, session: int, unordered: bool) -> int:
        """Deletes the stream's lock nodes of `owner` that `session` holds."""
        lock_dir = f"{self.path(stream)}/lock"
        deleted = 0

        async def nodes(
            streams: StreamMetaStore,
        ) -> tuple[list[str], list[tuple[bytes, Any] | None]]:
            paths = [f"{lock_dir}/{name}" for name in await streams.store.children(lock_dir)]
            return paths, await streams.store.get_many(paths)

        def orphans(paths: list[str], got: list[tuple[bytes, Any] | None]) -> list[str]:
            return [
                path
                for path, found in zip(paths, got, strict=True)
                if found is not None  # (else its session ended meanwhile)
                and found[1].ephemeral_owner == session
                and _lock_owner(found[0]) == owner
            ]

        with contextlib.suppress(NoNodeError):
            paths, got = await (self.read_unordered(nodes) if unordered else nodes(self))
            if unordered and orphans(paths, got):
                # found in a view that may be stale (a node of the same name in an earlier
                # incarnation of the directory): confirmed in this session's before deleting
                paths, got = await nodes(self)
            for path in orphans(paths, got):
                await self._release_path(path)
                deleted += 1
        return deleted

    async def _release_path(self, path: str) -> None:
        with contextlib.suppress(NoNodeError):  # the session ended and took it
            await self.store.delete(path, version=-1)


def _lock_token(data: bytes) -> str | None:
    try:
        token = json.loads(data).get("token")
    except (ValueError, AttributeError):
        return None
    return token if isinstance(token, str) else None


def _lock_owner(data: bytes) -> str:
    """The "owner@region" of a lock node's body (its raw text if it is not one of ours)."""
    try:
        body = json.loads(data)
        return f"{body['owner']}@{body['region']}"
    except (ValueError, KeyError, TypeError):
        return data.decode(errors="replace")


def _counters(max_txid: int, next_seq: int) -> bytes:
    return json.dumps({"max_txid": max_txid, "next_seq": next_seq}, sort_keys=True).encode()


def _lowest(names: list[str]) -> str | None:
    ours = [n for n in names if n.startswith(LOCK_PREFIX)]
    return min(ours) if ours else None
