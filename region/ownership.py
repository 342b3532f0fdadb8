"""A write proxy's streams: which it owns (with their writers), and where the others live.

A request for stream S is served here when this proxy owns S; sent to S's owner when another
live proxy owns it (in any region); and, when nobody owns S, sent to S's home proxy on this
region's ring, which takes ownership (an ephemeral lock, then fencing and recovery of the last
segment by LogWriter.open). A redirected request (hop >= 1) is never sent on by the ring, only
to an actual owner, so two proxies with different views of the ring cannot bounce it forever.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from dataclasses import dataclass, field

from core.errors import (
    GlobelogError,
    NoNodeError,
    OutcomeUnknownError,
    OverCapacityError,
    OwnershipError,
    OwnerUnreachableError,
)
from core.settings.limits import ProxyLimits
from core.streams import StreamSettings
from core.topology import Replication
from global_meta import MetaSession
from global_meta.streams import StreamMetaStore
from ledger import LedgerClient
from region.drain import region_drained
from region.idempotence.producers import ProducerBudget, ProducerTable
from region.idempotence.rebuild import REBUILD_READERS_PER_PROXY, Idempotence, rebuild_table
from region.observability.telemetry import PROXY_METRICS
from region.observability.tracing import child_span
from region.registry import ROOT as PROXIES_ROOT
from region.registry import (
    ProxyInfo,
    Ring,
    lookup,
    proxy_path,
    refuses_connections,
    registration,
)
from writer.log_writer import LogWriter, WriterConfig

log = logging.getLogger(__name__)
KIND = "write"
CLOSE_TIMEOUT_S = 30.0
LOST_QUIET_S = 5.0  # a stream on a lost bookie is released once no request came for this long


@dataclass(frozen=True, slots=True)
class Redirect:
    """Serve this request at `url` instead (the owner, or the stream's home proxy)."""

    url: str
    owner: str


@dataclass
class Owned:
    writer: LogWriter
    session: int  # the txid of the session marker this owner wrote last (session writes)
    idempotence: Idempotence
    inflight_bytes: int = 0
    exclusive: bool = False  # the session is exclusive: writes without a session are refused
    flush_scheduled: bool = False  # a flush of the writer's buffer is due this loop turn
    used_at: float = 0.0  # when a request last came for it (the event loop's clock)


@dataclass
class OwnershipConfig:
    me: ProxyInfo
    replication: Replication
    settings: StreamSettings = field(default_factory=StreamSettings)
    # How long a proxy waits for the lock of an owner its client could not reach (the owner's
    # ZooKeeper session ends and takes the lock); it then takes the stream at once.
    takeover_wait_s: float = 5.0
    # A bookie missing from the registry this long is lost (topology.yaml's
    # rebuild.lost_bookie_delay_s): an idle stream writing to it is released, so its segment
    # completes and the rebuilders re-make the copies it held.
    lost_bookie_delay_s: float = 60.0
    # Break the lock of an owner a client could not reach once its address refuses
    # connections (`Ownership._break_if_gone`). Off where a live process's port can refuse
    # (a firewall's REJECT, a load balancer without ready endpoints in front of it): its
    # streams then wait for its session's end. `globelog serve write-proxy
    # --no-lock-breaking`.
    break_refusing_owners: bool = True


class Ownership:
    def __init__(
        self,
        config: OwnershipConfig,
        store: MetaSession,
        ledgers: LedgerClient,
        ring: Ring,
        limits: ProxyLimits | None = None,
        reads: MetaSession | None = None,
    ) -> None:
        """`reads`: a second ZooKeeper session for reads that may be stale (a take's early
        read: global_meta.streams.StreamMetaStore.unordered); None: `store`."""
        self.config = config
        self._reads = reads
        self.limits = limits or ProxyLimits()
        self.producer_budget = ProducerBudget(self.limits.producer_acks_max)
        # readers of every producer table's rebuild at once (each up to 32 entries ahead)
        self.rebuild_readers = asyncio.Semaphore(REBUILD_READERS_PER_PROXY)
        self._store = store
        self._ledgers = ledgers
        self._ring = ring
        self._namespaces: dict[str, StreamMetaStore] = {}
        self._owned: dict[tuple[str, str], Owned] = {}
        self._opening: dict[tuple[str, str], asyncio.Task[Owned | Redirect]] = {}
        self.drained: frozenset[tuple[str, str]] = frozenset()  # kept by the proxy's watch
        self.region_drained = False  # every stream drained here (the region is leaving)

    def streams(self, namespace: str) -> StreamMetaStore:
        streams = self._namespaces.get(namespace)
        if streams is None:
            streams = StreamMetaStore(self._store, namespace, self._reads)
            self._namespaces[namespace] = streams
        return streams

    @property
    def owned(self) -> list[tuple[str, str]]:
        return sorted(self._owned)

    def owned_keys(self) -> set[tuple[str, str]]:
        return set(self._owned)

    def owned_here(self, namespace: str, stream: str) -> Owned | None:
        return self._owned.get((namespace, stream))

    async def resolve(
        self, namespace: str, stream: str, hop: int, unreachable: str | None = None
    ) -> Owned | Redirect:
        """This proxy's writer for the stream, taking ownership if it is the stream's home,
        or where to send the request.

        `unreachable`: the owner ("name@region") the client could not reach. While it still
        holds the lock, this proxy queues for the lock (up to `takeover_wait_s`) instead of
        redirecting the client back to it, and takes the stream the moment the owner's session
        ends (no polling by the client); another owner (found first, or first in the queue)
        is redirected to. An owner whose address refuses connections is gone: its lock goes.
        """
        key = (namespace, stream)
        if self.is_drained(key):
            return await self._elsewhere_than_here(key)
        owned = self._owned.get(key)
        if owned is not None and owned.writer.failed:
            # fenced, its session or its lock gone: what it knows is stale, even for reads
            # (`.../last`, a producer's last seq); the stream is looked up afresh
            log.warning("writer of %s/%s failed; dropped, lock released", *key)
            self.forget(namespace, stream, owned)
            owned = None
        if owned is not None:
            owned.used_at = asyncio.get_running_loop().time()
            return owned
        opening = self._opening.get(key)
        if opening is not None:
            return await asyncio.shield(opening)
        streams = self.streams(namespace)
        if unreachable is None:  # else the take's lock says it (a read less before the queue)
            await streams.require(stream)
        elsewhere = await self._owner_elsewhere(streams, stream, unreachable)
        if elsewhere is not None and elsewhere.owner != unreachable:
            return elsewhere
        owned = self._owned.get(key)  # taken by this proxy while this request looked around
        if owned is not None:
            return owned
        if key in self._opening:
            return await self._unless_drained(key, await self._take(key, streams))
        if elsewhere is not None:  # held by the owner the client could not reach
            # Not sent to the ring's home: that is often the unreachable owner itself.
            taken = await self._take(key, streams, self.config.takeover_wait_s, elsewhere)
            return await self._unless_drained(key, taken)
        home = await self._home_elsewhere(namespace, stream, hop)
        if home is not None:
            return home
        return await self._unless_drained(key, await self._take(key, streams))

    async def _unless_drained(
        self, key: tuple[str, str], taken: Owned | Redirect
    ) -> Owned | Redirect:
        """A take that a drain overtook: the drain's release pass ran before the stream was
        owned here, so it is let go now and the request sent elsewhere."""
        if isinstance(taken, Owned) and self.is_drained(key):
            return await self._elsewhere_than_here(key)
        return taken

    async def _home_elsewhere(self, namespace: str, stream: str, hop: int) -> Redirect | None:
        """The stream's home proxy in this region when that is another live proxy and the
        request was not redirected yet."""
        home = self._ring.home(f"{namespace}/{stream}")
        if hop == 0 and home is not None and home != self.config.me.name:
            info = await lookup(self._store, KIND, self.config.me.region, home)
            if info is not None:
                return Redirect(info.url, f"{home}@{info.region} (home on the ring)")
        return None

    async def _owner_elsewhere(
        self, streams: StreamMetaStore, stream: str, unreachable: str | None = None
    ) -> Redirect | None:
        """Where the stream's owner is, None when nobody holds its lock (or this proxy is
        taking it). Asked with the owner a client could not reach, this server's view is
        taken when it names that owner (no sync with the leader: a WAN round trip off the
        takeover; the queue for the lock finds out whether it is still held), and read
        again synced when it names another. Those reads of a view that may be stale go
        through the reads session: a gone owner's streams are all taken at once, and in the
        main session each read would wait for the other takes' writes."""
        owner = None
        if unreachable is not None:
            owner = await streams.read_unordered(lambda s: s.owner(stream, synced=False))
        unordered = owner is not None and owner == unreachable
        if not unordered:
            owner = await streams.owner(stream)
        if owner is None:
            return None
        name, _, region = owner.rpartition("@")
        if name == self.config.me.name and region == self.config.me.region:
            key = (streams.namespace, stream)
            if key in self._opening or key in self._owned:
                return None  # this proxy is taking it right now: the caller waits for that
            if await streams.release_orphans(stream, owner):
                # Its own session's lock that nothing here holds: made by a take whose answer
                # a dropped connection lost. Released, the stream is free to take again.
                log.warning("released orphaned lock node(s) of %s/%s", *key)
                return await self._owner_elsewhere(streams, stream)
            # A lock of this proxy's that it does not hold: left by a previous incarnation
            # whose session has not expired yet. It goes with that session.
            raise OwnershipError(
                f"stream {stream!r} is still locked by an earlier run of this proxy "
                f"({owner}); its ZooKeeper session will expire it",
                owner=owner,
            )
        reads = streams.read_unordered if unordered else (lambda read: read(streams))
        info = await reads(lambda s: lookup(s.store, KIND, region, name))
        if info is None:
            raise OwnerUnreachableError(
                f"stream {stream!r} is owned by {owner}, which is not a live write proxy "
                "(a library-mode writer, or a proxy whose session is ending)"
            )
        return Redirect(info.url, owner)

    async def _take(
        self,
        key: tuple[str, str],
        streams: StreamMetaStore,
        wait_s: float = 0.0,
        going: Redirect | None = None,
    ) -> Owned | Redirect:
        """One opening per stream, however many requests wait for it; `wait_s`: how long
        it queues for the lock of `going`, an owner a client could not reach."""
        task = self._opening.get(key)
        if task is None:
            most = self.limits.owned_streams_max
            if len(self._owned) + len(self._opening) >= most:
                raise OverCapacityError(
                    f"this write proxy owns {len(self._owned)} streams and is taking "
                    f"{len(self._opening)}, its most ({most}, owned_streams_max); streams "
                    "unused for stream_idle_release_s are let go: retry later"
                )
            task = asyncio.get_running_loop().create_task(self._open(key, streams, wait_s, going))
            self._opening[key] = task
            task.add_done_callback(lambda done: self._opened(key, done))
        return await asyncio.shield(task)

    def _opened(self, key: tuple[str, str], task: asyncio.Task[Owned | Redirect]) -> None:
        self._opening.pop(key, None)
        if not task.cancelled():
            task.exception()  # retrieved: the requests that waited for it got it too

    async def _open(
        self,
        key: tuple[str, str],
        streams: StreamMetaStore,
        wait_s: float,
        going: Redirect | None = None,
    ) -> Owned | Redirect:
        settings = self.config.settings
        if wait_s > 0:
            settings = dataclasses.replace(settings, lock_timeout_s=wait_s)
        config = WriterConfig(
            region=self.config.me.region,
            replication=self.config.replication,
            settings=settings,
            owner=self.config.me.name,
            lock_waits_for=None if going is None else going.owner,  # another may win
        )
        me = f"{self.config.me.name}@{self.config.me.region}"
        # beside the queueing for the lock, whose watch then sees a broken lock go at once
        breaking = None
        if going is not None and self.config.break_refusing_owners:
            breaking = asyncio.get_running_loop().create_task(
                self._break_if_gone(streams, key, going)
            )
        try:
            with child_span("globelog.take_ownership") as span:
                if span.is_recording():
                    span.set_attributes({"globelog.stream": key[1], "globelog.lock_wait_s": wait_s})
                # nothing of this proxy's locks the stream while it is not taken: a lock node
                # of its session there is an orphan, which would stand before the new one
                await streams.release_orphans(key[1], me, unordered=True)
                writer = await LogWriter.open(streams, self._ledgers, key[1], config)
        except OwnershipError:
            elsewhere = await self._owner_elsewhere(streams, key[1])  # lost a race: the winner
            if elsewhere is None:
                raise
            return elsewhere
        finally:
            if breaking is not None:
                breaking.cancel()  # nothing when it is done; else the take ended without it
                await asyncio.wait([breaking])
                if not breaking.cancelled() and breaking.exception() is not None:
                    log.error("breaking a gone owner's lock failed", exc_info=breaking.exception())
        # A new owner starts a new write session: sessions of the previous owner are fenced.
        # Its marker is not waited for: every write after it is acknowledged after it.
        try:
            session = writer.start_session()
        except BaseException:
            await writer.abandon()
            raise
        streams_of = self.streams(key[0])

        async def producers() -> ProducerTable:
            return await rebuild_table(
                streams_of, self._ledgers, key[1], writer.next_seq,
                budget=self.producer_budget, owner_segment=writer.segment.sequence,
                readers=self.rebuild_readers,
            )  # fmt: skip

        owned = self._owned[key] = Owned(
            writer, session, Idempotence(producers), used_at=asyncio.get_running_loop().time()
        )
        took = ", ".join(f"{step} {seconds:.3f} s" for step, seconds in writer.open_steps.items())
        log.info("took ownership of %s/%s (session %d): %s", *key, session, took)
        PROXY_METRICS.ownership_changes.add(1, {"event": "taken"})
        return owned

    async def _break_if_gone(
        self, streams: StreamMetaStore, key: tuple[str, str], owner: Redirect
    ) -> None:
        """A client could not reach the stream's owner. When the owner's address refuses
        connections, nothing listens there any more: its process is gone, though ZooKeeper
        would keep its lock for a session timeout and more (the stream unwritable all that
        while). The lock is broken now, but only the node that owns the stream, held by the
        session that registered the refusing address (not a restarted proxy of the same
        name). A paused or cut-off owner accepts connections or answers nothing: its lock
        goes with its session. A failure here only leaves the lock to the session's end."""
        try:
            holder = await streams.holder(key[1])
            if holder is None or holder.owner != owner.owner:
                return  # gone already, or another's by now
            name, _, region = holder.owner.rpartition("@")
            found = await registration(self._store, KIND, region, name)
            if found is None or found[1] != holder.session:
                return  # not the incarnation that holds the lock
            if not await refuses_connections(found[0].url):
                return
            if not await streams.break_lock(holder):
                return
        except GlobelogError as err:
            log.warning("could not break the lock of %s/%s held by %s: %s", *key, owner.owner, err)
            return
        log.warning(
            "broke the lock of %s/%s held by %s: its address %s refuses connections",
            *key, owner.owner, found[0].url,
        )  # fmt: skip
        PROXY_METRICS.ownership_changes.add(1, {"event": "lock_broken"})

    async def _elsewhere_than_here(self, key: tuple[str, str]) -> Redirect:
        """A drained stream's requests: to its owner in another region, or to a write proxy of
        another region, which will take it once this proxy let it go."""
        await self.release(*key)
        streams = self.streams(key[0])
        await streams.require(key[1])
        owner = await self._owner_elsewhere(streams, key[1])
        if owner is not None and not owner.owner.endswith(f"@{self.config.me.region}"):
            return owner
        for region in await self._store.children(PROXIES_ROOT):
            if region == self.config.me.region or await region_drained(self._store, region):
                continue  # a leaving region would send the stream straight back
            try:
                names = await self._store.children(proxy_path(region, KIND))
            except NoNodeError:
                continue
            for name in names:
                info = await lookup(self._store, KIND, region, name)
                if info is not None:
                    return Redirect(
                        info.url, f"{name}@{region} (drained in {self.config.me.region})"
                    )
        raise OwnerUnreachableError(
            f"stream {key[0]}/{key[1]} is drained in {self.config.me.region} and no write proxy "
            "of another region is alive"
        )

    def is_drained(self, key: tuple[str, str]) -> bool:
        return self.region_drained or key in self.drained

    async def release_drained(self) -> None:
        """Releases every owned stream that is now drained here. A release that fails is
        logged and, once the others were tried, the first failure is raised: the drain
        follower shows it, restarting, and its restart applies the drains again."""
        failures: list[GlobelogError] = []
        for key in [k for k in self._owned if self.is_drained(k)]:
            try:
                await self.release(*key)
            except GlobelogError as err:
                failures.append(err)
            else:
                log.info("released drained stream %s/%s", *key)
                continue
            log.warning("releasing drained stream %s/%s failed: %s", *key, failures[-1])
        if failures:
            raise failures[0]

    def forget(self, namespace: str, stream: str, owned: Owned) -> None:
        """Drops a writer that failed or was fenced; the next request resolves afresh."""
        if self._owned.get((namespace, stream)) is owned:
            del self._owned[(namespace, stream)]
            owned.idempotence.close()
            abandoning = owned.writer.abandon(release_lock=True)
            task = asyncio.get_running_loop().create_task(abandoning)
            task.add_done_callback(_log_failure)

    async def drop_all(self) -> None:
        """The session that held every lock expired: other proxies may own these streams now.
        Each writer is abandoned (a new owner fences its ledger anyway); nothing is released,
        as nothing is held any more."""
        for key, owned in list(self._owned.items()):
            self.forget(*key, owned)
            log.warning("lost ownership of %s/%s with the ZooKeeper session", *key)
            PROXY_METRICS.ownership_changes.add(1, {"event": "lost"})

    async def release(self, namespace: str, stream: str, only: Owned | None = None) -> bool:
        """Closes this proxy's writer of the stream (its segment completed, lock released);
        with `only`, that writer only (not one that took the stream since). False when there
        was none to close. OutcomeUnknownError when the writer did not close in time (this
        proxy no longer serves the stream either way)."""
        owned = self._owned.get((namespace, stream))
        if owned is None or (only is not None and owned is not only):
            return False
        del self._owned[(namespace, stream)]
        owned.idempotence.close()
        PROXY_METRICS.ownership_changes.add(1, {"event": "released"})
        try:
            async with asyncio.timeout(CLOSE_TIMEOUT_S):
                await owned.writer.close()
        except TimeoutError:
            raise OutcomeUnknownError(
                f"stream {namespace}/{stream}: its writer did not close within "
                f"{CLOSE_TIMEOUT_S} s; whether its segment was completed and its lock released "
                "is unknown (this proxy no longer serves it)",
                "timeout",
            ) from None
        return True

    async def release_idle(self) -> int:
        """Releases the owned streams no request came for in `stream_idle_release_s` and
        with nothing in flight; how many. Each holds a writer, an open ledger and a lock."""
        idle_before = asyncio.get_running_loop().time() - self.limits.stream_idle_release_s
        idle = [
            key
            for key, owned in self._owned.items()
            if owned.used_at < idle_before and owned.inflight_bytes == 0
        ]
        released = 0
        for key in idle:
            try:
                released += await self.release(*key)
            except GlobelogError as err:
                log.warning("releasing idle stream %s/%s failed: %s", *key, err)
        if released:
            log.info(
                "released %d stream(s) idle for %g s", released, self.limits.stream_idle_release_s
            )
        return released

    async def release_on_lost_bookies(self) -> int:
        """Moves owned streams off lost and leaving bookies; how many it released.

        A stream being written leaves a lost bookie by itself (its next add fails there and its
        writer changes ensemble); an idle one would keep the entries it wrote there one copy
        short until its idle release, since the rebuilders leave an open ensemble to its
        writer. Released, its segment completes and is theirs to copy. A bookie an operator
        decommissions (a region's removal decommissions all of its bookies) still answers, so
        a busy stream's writer never leaves it by itself: its segment is rolled, and the next
        one is placed without it."""
        now = asyncio.get_running_loop().time()
        lost = {
            bookie
            for bookie, since in self._ledgers.down_since.items()
            if now - since >= self.config.lost_bookie_delay_s
        }
        leaving = self._ledgers.leaving
        if not lost and not leaving:
            return 0
        released = 0
        for key, owned in list(self._owned.items()):
            open_bookies = set(owned.writer.open_bookies)
            bookies = (lost | leaving) & open_bookies
            # a request may hold the writer before it counts its bytes in flight: only a
            # stream no request came for in LOST_QUIET_S is let go
            quiet = now - owned.used_at >= LOST_QUIET_S
            if not bookies:
                continue
            if owned.inflight_bytes or not quiet:
                if leaving & open_bookies and self._ledgers.can_place(
                    self._ledgers.replication_for_new(self.config.replication)
                ):
                    log.info("rolling stream %s/%s off leaving %s", *key, leaving & open_bookies)
                    owned.writer.roll_now()
                continue
            try:
                released += await self.release(*key, only=owned)
            except GlobelogError as err:
                log.warning("releasing stream %s/%s off %s failed: %s", *key, bookies, err)
            else:
                log.info("released stream %s/%s: its open ensemble names %s", *key, bookies)
        return released

    async def release_all(self) -> None:
        for namespace, stream in list(self._owned):
            with contextlib.suppress(GlobelogError):
                await self.release(namespace, stream)


def _log_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.warning("abandoning a failed writer: %s", task.exception())
