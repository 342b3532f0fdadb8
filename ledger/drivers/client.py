"""LedgerClient: the composition of metadata, bookie connections and placement for one region.

async with await LedgerClient.connect(store, LedgerConfig(region="us-east")) as client:
    writer = await client.create(replication, password=b"...")
    await writer.add(b"payload"); await writer.close()
    reader = await client.open(writer.ledger_id, password=b"...", recover=True)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Collection, Coroutine
from typing import Any, TypeVar

from opentelemetry import metrics

from core import errors, runtime
from core.background import Background
from core.errors import MetadataError, QuorumError
from core.routes import TOPOLOGY_ZNODE, PublishedTopology, decode_published
from core.settings.rebuild_settings import DECOMMISSION_ZNODE
from core.topology import Replication
from global_meta import MetaSession
from global_meta.followers import Follower, FollowerStatus, run_together
from global_meta.store import Op
from ledger.codecs.metadata import LEDGERS_ROOT, Ensemble, LedgerMetadata
from ledger.connections.bookie_client import SILENCE_EVIDENCE_S, BookieClient, ClientOperation
from ledger.drivers.context import MIN_REGIONS_KEY, LedgerConfig, LedgerContext
from ledger.drivers.metadata_store import (
    TIDY_WAIT_S,
    VISITS_AT_ONCE,
    LedgerMetadataStore,
    VersionedMetadata,
)
from ledger.drivers.read_handle import LedgerReader
from ledger.drivers.rebuild import (
    LedgerRebuild,
    Pace,
    ReplicaGap,
    no_pacing,
    rebuild_ledger,
    replica_gaps,
)
from ledger.drivers.recover import recover
from ledger.drivers.telemetry import LedgerMetrics
from ledger.drivers.write_handle import LedgerWriter
from ledger.errors import LedgerUnauthorizedError, NoSuchLedgerMetadataError
from placement import (
    ClientLocation,
    ClusterView,
    LocatedBookie,
    NotEnoughBookiesError,
    PlacementConfig,
    PlacementError,
    PlacementState,
)

AVAILABLE = f"{LEDGERS_ROOT}/available"
READ_ONLY = f"{AVAILABLE}/readonly"

log = logging.getLogger(__name__)
T = TypeVar("T")
# A metadata read through another session of the caller's (`read_through`) is waited for this
# long, then made through the client's own.
READ_THROUGH_WAIT_S = 1.0
# A batched read's time grows with its entries: it says nothing of one read's. A probe's
# (BookieClient.watch) is the network's alone, which read ordering has no use for.
TEACH_NO_LATENCY = frozenset({ClientOperation.BATCH_READ, ClientOperation.PROBE})


class LedgerClient:
    """Creates, opens, recovers and deletes ledgers; `async with` it to release everything."""

    def __init__(
        self,
        store: MetaSession,
        published: PublishedTopology,
        config: LedgerConfig,
        bookies: BookieClient,
        meter: metrics.Meter | None = None,
    ) -> None:
        if config.region not in published.regions:
            raise MetadataError(
                f"region {config.region!r} is not in the published topology {list(published.regions)}"
            )
        self.published = published
        cluster = ClusterView.all_writable(
            LocatedBookie(b.bookie_id, b.region, b.rack) for b in published.bookies
        )
        placement = PlacementState(
            cluster, PlacementConfig(ClientLocation(config.region, config.rack))
        )
        placement.set_drained_regions(published.drained)
        self.context = LedgerContext(
            LedgerMetadataStore(store),
            bookies,
            placement,
            config,
            asyncio.get_running_loop().time,
            LedgerMetrics.create(meter),
        )
        self._store = store
        # known bookies neither writable nor read-only, and since when (the loop's clock)
        self.down_since: dict[str, float] = {}
        self.leaving: frozenset[str] = frozenset()  # bookies an operator decommissions
        self._membership = Follower(
            "bookie membership", self._follow_membership, on_failed=self._count_restart
        )
        self._topology = Follower(
            "published topology", self._follow_topology, on_failed=self._count_restart
        )
        self._tidying = Background()  # see `tidy`

    @classmethod
    async def connect(
        cls, store: MetaSession, config: LedgerConfig, meter: metrics.Meter | None = None
    ) -> LedgerClient:
        """Reads the published topology and starts following bookie membership.

        `meter`: where the client's OpenTelemetry instruments live (default: the global one).
        """
        data, _ = await store.get(TOPOLOGY_ZNODE)
        published = decode_published(data, TOPOLOGY_ZNODE)
        holder: list[LedgerClient] = []

        def observe(bookie: str, operation: str, seconds: float, healthy: bool) -> None:
            # Only answers teach latency; failures reach placement through the machines.
            if not holder or not healthy:
                return
            context = holder[0].context
            if operation in TEACH_NO_LATENCY:
                # Still an answer (no longer silent since a failure), unless requests it has
                # not answered wait there: a stalled journal answers probes, not adds.
                if context.bookies.silent_since_s(bookie) is None:
                    context.placement.record_answer(bookie, context.clock())
            else:
                context.placement.record_latency(bookie, seconds, context.clock())

        def resolve(bookie_id: str) -> str:
            # the newest publication: a bookie added later is dialled at its published route
            newest = holder[0].published if holder else published
            return newest.address(config.region, bookie_id)

        bookies = BookieClient(resolve, config.bookie_client(), observe=observe)
        await store.ensure_path(DECOMMISSION_ZNODE)
        client = cls(store, published, config, bookies, meter)
        holder.append(client)
        await client._refresh_membership()
        client._membership.start()
        client._topology.start()
        return client

    async def watch_bookies(self) -> None:
        """Until cancelled, keeps a question pending at every bookie of the published topology
        (`BookieClient.watch`): a write proxy's, whose takes recover ledgers on bookies it
        may have sent nothing, so that a cut one's silence is known before its fences. Only
        registered bookies are asked: a dial to one not up yet would fail and back it off in
        the pool, and the first add placed on it once it registers would fail at once."""

        def registered() -> list[str]:
            return [
                b.bookie_id for b in self.published.bookies if b.bookie_id not in self.down_since
            ]

        await self.context.bookies.watch(registered)

    def followers(self) -> list[FollowerStatus]:
        """The states of the client's metadata watch followers, for its owner's health."""
        return [self._membership.status(), self._topology.status()]

    def _count_restart(self, status: FollowerStatus) -> None:
        self.context.metrics.follower_restarts.add(1, {"follower": status.name})

    def _apply_topology(self, published: PublishedTopology) -> bool:
        if self.context.config.region not in published.regions:
            log.error(
                "ignored a republished topology without this client's region %r (regions %s)",
                self.context.config.region,
                list(published.regions),
            )
            return False
        self.published = published
        self.context.placement.update_locations(
            LocatedBookie(b.bookie_id, b.region, b.rack) for b in published.bookies
        )
        self.context.placement.set_drained_regions(published.drained)
        return True

    def replication_for_new(self, configured: Replication) -> Replication:
        """The replication of a ledger made now: the published one when the topology carries
        one (`globelog region add` may change it with the region count: ledgers made
        after the change take it, earlier ones keep theirs), else `configured`."""
        return self.published.replication or configured

    async def _follow_topology(self, following: Callable[[], None]) -> None:
        """Picks up a republished topology (`globelog init` after adding a bookie): its
        bookies' locations for placement, their routes for connections."""
        async with contextlib.aclosing(self._store.watch_data(TOPOLOGY_ZNODE)) as watch:
            async for found in watch:
                following()
                if found is None:
                    continue
                try:
                    published = decode_published(found[0], TOPOLOGY_ZNODE)
                except MetadataError as err:  # keep the last good one
                    log.error("ignored an unreadable republished topology: %s", err)
                    continue
                if published != self.published and self._apply_topology(published):
                    log.info(
                        "topology %r republished: %d bookies",
                        published.name,
                        len(published.bookies),
                    )

    async def _refresh_membership(self) -> None:
        """Registered bookies are writable, except read-only ones and those an operator is
        decommissioning: both still serve their copies, neither takes new ones."""
        names = set(await self._store.children(AVAILABLE))
        read_only = set(await self._store.children(READ_ONLY)) if "readonly" in names else set()
        leaving = set(await self._store.children(DECOMMISSION_ZNODE))
        self.leaving = frozenset(leaving)
        self.context.placement.update_membership(
            names - {"readonly"} - leaving, read_only | (names & leaving)
        )
        now, up = self.context.clock(), names | read_only
        self.down_since = {
            b.bookie_id: self.down_since.get(b.bookie_id, now)
            for b in self.context.placement.cluster.bookies
            if b.bookie_id not in up
        }

    async def _follow_membership(self, following: Callable[[], None]) -> None:
        """Keeps placement's writable/read-only view in step with bookie registrations and
        decommissions. A failed refresh fails the follower: its restart reads them afresh,
        where waiting for the next change would leave placement stale until a bookie comes
        or goes."""
        paths = [AVAILABLE, DECOMMISSION_ZNODE]
        if await self._store.exists(READ_ONLY) is not None:  # a read-only bookie that dies
            paths.append(READ_ONLY)  # leaves only here: it is down (`down_since`)
        await run_together(*(self._follow_children(path, following) for path in paths))

    async def _follow_children(self, path: str, following: Callable[[], None]) -> None:
        async with contextlib.aclosing(self._store.watch_children(path)) as watch:
            async for _ in watch:
                await self._refresh_membership()
                following()

    def tidy(self, work: Coroutine[Any, Any, None], what: str) -> None:
        """Runs `work`, a clean-up of ledgers made for nothing (`what` it is), beside the
        caller and past whatever ends the caller (a writer's close, a cancelled take); `close`
        waits for it up to TIDY_WAIT_S (past it, a ledger left is only space)."""
        self._tidying.run(work, what)

    async def close(self) -> None:
        await self._tidying.close(TIDY_WAIT_S)
        try:
            async with asyncio.TaskGroup() as stopping:
                stopping.create_task(self._membership.stop())
                stopping.create_task(self._topology.stop())
        finally:
            try:
                await self.context.metadata.close()
            finally:
                await self.context.bookies.close()

    async def __aenter__(self) -> LedgerClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ---------------------------------------------------------------------------- ledgers

    def can_place(self, replication: Replication) -> bool:
        """Whether a new ledger with `replication` could be placed now (nothing is made)."""
        try:
            self.context.placement.new_ensemble(replication, now_s=self.context.clock())
        except (PlacementError, QuorumError):
            return False
        return True

    def _new_ensemble(self, replication: Replication, now_s: float) -> tuple[str, ...]:
        """Placement's ensemble without the bookies this client sees silent now (requests
        unanswered for SILENCE_EVIDENCE_S: a cut the bookie watch dates), while that can
        be placed. A new owner makes its segment's ledger a few seconds into a cut, while
        the cut region's bookies are still registered: on them its first adds each waited
        a quorum lag and an ensemble change."""
        placement = self.context.placement
        silent = frozenset(
            b.bookie_id
            for b in placement.cluster.bookies
            if self.context.bookies.silent_since_s(b.bookie_id, SILENCE_EVIDENCE_S) is not None
        )
        if silent:
            try:
                return placement.new_ensemble(replication, excluded=silent, now_s=now_s)
            except NotEnoughBookiesError:
                pass  # as many copies as the rule needs cannot do without them
        return placement.new_ensemble(replication, now_s=now_s)

    async def create(
        self,
        replication: Replication,
        password: bytes | None = None,
        custom_metadata: tuple[tuple[str, bytes], ...] = (),
    ) -> LedgerWriter:
        """A new ledger on an ensemble chosen by region-aware placement, open for writing,
        with `password` (by default the client's, LedgerConfig.password)."""
        password = self._password(password)
        placed_s = self.context.clock()
        ensemble = self._new_ensemble(replication, placed_s)
        custom = (
            *custom_metadata,
            (MIN_REGIONS_KEY, str(replication.min_regions_for_durability).encode()),
        )
        metadata = LedgerMetadata(
            replication.ensemble_size,
            replication.write_quorum,
            replication.ack_quorum,
            (Ensemble(0, ensemble),),
            self.context.config.digest_type,
            password,
            ctime=runtime.wall_ms(),
            custom_metadata=custom,
        )
        versioned = await self.context.metadata.create(metadata)
        return LedgerWriter(self.context, versioned, placed_s)

    async def open(
        self,
        ledger_id: int,
        password: bytes | None = None,
        *,
        recover_ledger: bool = False,
        synced: bool = True,
        read_through: MetaSession | None = None,
    ) -> LedgerReader:
        """Opens for reading; with `recover_ledger`, fences and closes it first (a new owner).
        `password` (by default the client's) must be the ledger's: bookies refuse a fence
        with another, and so does this client before asking them. `synced=False` reads the
        metadata as this client's ZooKeeper server has it (no round trip to the leader): for
        a ledger the caller knows is closed from something it read through the same server
        (a completed segment: the close came first, or in the same multi-op); through
        `read_through`, when given, as `recover_for_commit`."""
        versioned = await self._metadata_for(
            ledger_id, password, synced=synced, read_through=read_through
        )
        if recover_ledger:
            recovered = await recover(self.context, versioned)
            return LedgerReader(self.context, recovered.metadata, known=recovered.tail)
        return LedgerReader(self.context, versioned)

    async def recover_for_commit(
        self,
        ledger_id: int,
        password: bytes | None = None,
        *,
        synced: bool = True,
        read_through: MetaSession | None = None,
    ) -> tuple[LedgerReader, Op | None]:
        """Fences and recovers the ledger as `open(recover_ledger=True)` does, but leaves its
        close to the caller: the op that closes it, for the caller's own multi-op (None when
        it was closed already), and a reader of the ledger as that op leaves it. Until the op
        is committed the ledger stays IN_RECOVERY (a later recovery finishes it).

        `synced=False` starts from the metadata as this client's ZooKeeper server has it
        (no round trip to the leader), for a caller that knows the server has seen the last
        writer's changes; a newer change fails the IN_RECOVERY compare-and-set, which reads
        the metadata again (and starts over on an ensemble that moved). `read_through`:
        another session of this process's to read it through when unsynced: a session
        answers in order, and this client's may have other ledgers' writes under way
        (another new owner's), each a round trip to the leader across the WAN."""
        versioned = await self._metadata_for(
            ledger_id, password, synced=synced, read_through=read_through
        )
        recovered = await recover(self.context, versioned, write_close=False)
        closing = recovered.closing
        if closing is None:
            return LedgerReader(self.context, recovered.metadata, known=recovered.tail), None
        op = self.context.metadata.write_op(recovered.metadata, closing)
        closed = VersionedMetadata(ledger_id, closing, recovered.metadata.version + 1)
        return LedgerReader(self.context, closed, known=recovered.tail), op

    async def _metadata_for(
        self,
        ledger_id: int,
        password: bytes | None,
        *,
        synced: bool = True,
        read_through: MetaSession | None = None,
    ) -> VersionedMetadata:
        """The ledger's metadata, once `password` (by default the client's) is found to be
        the ledger's."""
        password = self._password(password)
        versioned = None
        if not synced and read_through is not None and read_through is not self._store:
            # That session may be away, or behind what the caller read through this one:
            # waited for a while only, then read as without it.
            try:
                async with asyncio.timeout(READ_THROUGH_WAIT_S):
                    versioned = await LedgerMetadataStore(read_through).read(ledger_id, False)
            except (TimeoutError, MetadataError, NoSuchLedgerMetadataError) as err:
                log.info(
                    "ledger %d: its metadata read through the main session: %r", ledger_id, err
                )
        if versioned is None:
            versioned = await self.context.metadata.read(ledger_id, synced=synced)
        if versioned.metadata.password != password:
            raise LedgerUnauthorizedError(f"ledger {ledger_id}: the password does not match")
        return versioned

    def _password(self, named: bytes | None) -> bytes:
        if named is not None:
            return named
        if self.context.config.password is None:
            raise errors.ConfigError(
                "no ledger password: name one, or give the client the deployment's "
                "(LedgerConfig.password, core/security/secrets.ledger_password)"
            )
        return self.context.config.password

    async def ledger_ids(self) -> list[int]:
        """Every ledger of the cluster, ascending."""
        return await self.context.metadata.ledger_ids()

    async def visit_ledgers(
        self,
        visit: Callable[[VersionedMetadata], Awaitable[T]],
        ledger_ids: list[int] | None = None,
        at_once: int = VISITS_AT_ONCE,
    ) -> dict[int, T]:
        """`visit` over every ledger's metadata (or those of `ledger_ids`), `at_once` at a
        time, ledgers deleted meanwhile left out (`LedgerMetadataStore.visit`)."""
        return await self.context.metadata.visit(visit, ledger_ids, at_once)

    async def metadata(self, ledger_id: int) -> VersionedMetadata:
        """The ledger's newest metadata (NoSuchLedgerMetadataError when deleted)."""
        return await self.context.metadata.read(ledger_id)

    def replication_of(self, metadata: LedgerMetadata) -> Replication:
        """The ledger's replication, its own durability rule included."""
        return self.context.replication_of(metadata)

    async def replica_gaps(
        self, ledger_id: int, versioned: VersionedMetadata | None = None
    ) -> list[ReplicaGap]:
        """The ledger's fragments whose bookie lacks (or cannot serve) its copy (by its
        metadata `versioned` when the caller has just read it)."""
        if versioned is None:
            versioned = await self.context.metadata.read(ledger_id)
        return await replica_gaps(self.context, ledger_id, versioned.metadata)

    async def rebuild(
        self, ledger_id: int, replicas: Collection[str], pace: Pace | None = None
    ) -> LedgerRebuild:
        """Re-makes the ledger's copies on `replicas` elsewhere (ledger.drivers.rebuild);
        `gone` when the ledger was deleted before or during it. `pace` is awaited with each
        batch's bytes before it is sent (a rate limit)."""
        try:
            versioned = await self.context.metadata.read(ledger_id)
            return await rebuild_ledger(self.context, versioned, replicas, pace or no_pacing)
        except NoSuchLedgerMetadataError:
            return LedgerRebuild(ledger_id, (), (), gone=True)

    async def delete(self, ledger_id: int) -> None:
        """Removes the metadata; the bookies' garbage collector then frees the entries."""
        await self.context.metadata.delete(ledger_id)
