"""What every ledger handle of one client shares: metadata, bookies, placement, settings.

Also the metadata transitions a handle makes (ensemble change, recovery, close), each one a
compare-and-set that re-reads and re-decides when it loses a race.
"""

from __future__ import annotations

import dataclasses
import logging
import ssl
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from core.security.credentials import bookie_tls
from core.security.secrets import ledger_password
from core.topology import Replication, Topology
from ledger.codecs.entry import DigestType
from ledger.codecs.metadata import Ensemble, LedgerMetadata, LedgerState
from ledger.connections.bookie_client import BookieClient, BookieClientConfig
from ledger.connections.connection import ConnectionConfig
from ledger.drivers.metadata_store import LedgerMetadataStore, VersionedMetadata
from ledger.drivers.telemetry import LedgerMetrics
from ledger.errors import (
    LedgerClosedError,
    LedgerFencedError,
    LedgerHandleError,
    LedgerMetadataConflictError,
    MetadataFormatError,
)
from ledger.machines.add_state import QUORUM_LAG_S
from ledger.machines.signals import Health, RecordHealth
from placement import PlacementError, PlacementState

log = logging.getLogger(__name__)
# A bookie that answered nothing this long while requests waited there is read from last.
READ_SILENCE_S = 1.0
METADATA_ATTEMPTS_MAX = 8  # compare-and-set retries before a metadata update gives up
MIN_REGIONS_KEY = "globelog.min_regions_for_durability"  # custom metadata: the ledger's rule
# An ensemble change that placement answers with the same bookies (none better usable) asks
# the failed ones again after a wait that starts here and doubles up to the max (writers and
# recoveries alike)
UNCHANGED_FIRST_S, UNCHANGED_MAX_S = 0.1, 2.0


@dataclass(frozen=True, slots=True)
class LedgerConfig:
    region: str
    # The password of the ledgers this client creates and opens when the caller names none:
    # the deployment's secret (core/security/secrets.ledger_password); None, every caller
    # names its own
    password: bytes | None = field(default=None, repr=False)
    rack: str | None = None
    digest_type: DigestType = DigestType.CRC32C
    add_timeout_s: float = 5.0
    # an entry some bookies acknowledged waits this long for the rest of its ack quorum, then
    # the bookies it waits for are replaced (ledger/machines/add_state.py); None: only on
    # add_timeout_s
    quorum_lag_s: float | None = QUORUM_LAG_S
    read_timeout_s: float = 5.0
    long_poll_timeout_ms: int = 1000
    explicit_lac_interval_s: float = 0.0  # 0: off; >0: send the LAC when no entry carries it
    recovery_timeout_s: float = 30.0  # a recovery that has not closed the ledger by then fails
    min_regions_for_durability: int = 1  # used for ledgers whose metadata does not say
    batch_reads: bool = True  # ranges of entries with BookKeeper 4.17's batched reads
    # TLS to bookies (core/security/credentials.bookie_tls); None: in clear
    bookie_tls: ssl.SSLContext | None = field(default=None, repr=False)

    @classmethod
    def of(cls, topology: Topology, region: str, **settings: Any) -> LedgerConfig:
        """A deployment's client in `region`: its ledger password, TLS to its bookies and
        durability rule (`settings` override any field)."""
        values: dict[str, Any] = {
            "password": ledger_password(topology.security),
            "bookie_tls": bookie_tls(topology.security),
            "min_regions_for_durability": topology.replication.min_regions_for_durability,
        }
        return cls(region=region, **(values | settings))

    def bookie_client(self) -> BookieClientConfig:
        """The bookie connections of a client with this config."""
        return BookieClientConfig(connection=ConnectionConfig(tls=self.bookie_tls))


@dataclass(slots=True)
class LedgerContext:
    metadata: LedgerMetadataStore
    bookies: BookieClient
    placement: PlacementState
    config: LedgerConfig
    clock: Callable[[], float]
    metrics: LedgerMetrics = field(default_factory=LedgerMetrics.create)

    def record_health(self, action: RecordHealth) -> None:
        if action.health is Health.SLOW:
            self.placement.record_slow(action.bookie, self.clock())
        else:
            self.placement.record_failure(action.bookie, self.clock())

    def read_order(self, write_set: Sequence[str], now_s: float) -> tuple[str, ...]:
        """Placement's read order with the bookies this client sees silent (nothing answered
        for READ_SILENCE_S while requests wait there: most likely behind a cut) moved last.
        Each read waits out its timeout at a bookie it asks that never answers: a new
        owner's producer table, read from segments that name a cut region's bookies,
        waited 5 s a batch on them. (Longer than the writers' evidence: a busy bookie with
        one slow request out, a large batched read say, must not send reads across the WAN.)"""
        order = self.placement.read_order(write_set, now_s)

        def silent(bookie: str) -> bool:
            return self.bookies.silent_since_s(bookie, READ_SILENCE_S) is not None

        return silent_last(order, silent)

    def replication_of(self, metadata: LedgerMetadata) -> Replication:
        stored = dict(metadata.custom_metadata).get(MIN_REGIONS_KEY)
        min_regions = _min_regions(stored) if stored else self.config.min_regions_for_durability
        return Replication(
            metadata.ensemble_size, metadata.write_quorum, metadata.ack_quorum, min_regions
        )

    def replace(
        self,
        metadata: LedgerMetadata,
        ensemble: Sequence[str],
        failed: Sequence[str],
        silent: Sequence[str] = (),
    ) -> tuple[str, ...]:
        """`ensemble` with each failed bookie replaced by placement (never by a failed one);
        the regions of the `silent` ones (no answer: likely cut off) are picked last."""
        replication = self.replication_of(metadata)
        located = self.placement.cluster.by_id
        avoid = frozenset(located[b].region for b in silent if b in located)
        current = tuple(ensemble)
        for bookie in failed:
            current = self.placement.replace_bookie(
                replication,
                current,
                bookie,
                excluded=frozenset(failed),
                now_s=self.clock(),
                avoid_regions=avoid,
            )
        return current

    def spread(
        self,
        metadata: LedgerMetadata,
        ensemble: Sequence[str],
        bookie: str,
        unreachable: Collection[str] = (),
    ) -> tuple[str, ...]:
        """`ensemble` with `bookie` moved to a region it does not span yet (see
        `PlacementState.member_to_spread`), or unchanged when placement finds no such move
        that keeps the rule. `unreachable` bookies are not chosen. No quarantine of recent
        failures: the caller asks only where the bookies answer again."""
        replication = self.replication_of(metadata)
        located = self.placement.cluster.by_id
        if bookie not in located:  # gone from a topology republished since it was asked
            return tuple(ensemble)
        try:
            moved = self.placement.replace_bookie(
                replication,
                ensemble,
                bookie,
                excluded=frozenset({bookie, *unreachable}),
                avoid_regions=frozenset({located[bookie].region}),
            )
        except PlacementError:
            return tuple(ensemble)

        def regions(bookies: Sequence[str]) -> int:
            return len({located[b].region for b in bookies if b in located})

        return moved if regions(moved) > regions(ensemble) else tuple(ensemble)


def silent_last(order: Sequence[str], silent: Callable[[str], bool]) -> tuple[str, ...]:
    """`order` with the `silent` bookies moved to its end, each group in its own order."""
    quiet = [b for b in order if silent(b)]
    return (*(b for b in order if b not in quiet), *quiet)


def with_ensemble(metadata: LedgerMetadata, ensemble: Ensemble) -> LedgerMetadata:
    """The history with `ensemble` added; one starting where the last starts replaces it,
    and one that so comes back to the ensemble before the last undoes the last change (no
    entry was acknowledged on it): two equal ensembles in a row would say nothing."""
    history = list(metadata.ensembles)
    if history[-1].first_entry_id == ensemble.first_entry_id:
        history[-1] = ensemble
        if len(history) > 1 and history[-2].bookies == ensemble.bookies:
            history.pop()
    else:
        assert history[-1].first_entry_id < ensemble.first_entry_id, (history, ensemble)
        history.append(ensemble)
    return dataclasses.replace(metadata, ensembles=tuple(history))


async def update_metadata(
    store: LedgerMetadataStore,
    current: VersionedMetadata,
    change: Callable[[LedgerMetadata], LedgerMetadata],
) -> VersionedMetadata:
    """Applies `change` by compare-and-set; on a lost race re-reads and applies it again.

    `change` raises (LedgerHandleError) when the fresh metadata makes it wrong to proceed.
    """
    for _ in range(METADATA_ATTEMPTS_MAX):
        try:
            return await store.write(current, change(current.metadata))
        except LedgerMetadataConflictError:
            current = await store.read(current.ledger_id)
    raise LedgerHandleError(
        f"ledger {current.ledger_id}: metadata kept changing over {METADATA_ATTEMPTS_MAX} attempts"
    )


def require_open(ledger_id: int) -> Callable[[LedgerMetadata], None]:
    """A check for writers: the ledger must still be OPEN (recovery fences, close ends it)."""

    def check(metadata: LedgerMetadata) -> None:
        if metadata.state is LedgerState.IN_RECOVERY:
            raise LedgerFencedError(f"ledger {ledger_id}: another client is recovering it")
        if metadata.state is LedgerState.CLOSED:
            raise LedgerClosedError(
                f"ledger {ledger_id}: closed by another client at entry {metadata.last_entry_id}"
            )

    return check


def _min_regions(stored: bytes) -> int:
    """The ledger's own durability rule from its custom metadata; a clear error if malformed."""
    try:
        value = int(stored.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        value = 0
    if value < 1:
        raise MetadataFormatError(
            f"ledger custom metadata {MIN_REGIONS_KEY}={stored!r}: expected a decimal integer >= 1"
        )
    return value


def say_nowhere(ledger_id: int, who: str, bookies: Sequence[str], err: Exception) -> None:
    """Logs that silent bookies of a ledger are waited for, placement having no other
    (callers say it once per handle or recovery: they may wait many times)."""
    log.info(
        "ledger %d: %s waits for silent %s, placement has no other: %s",
        ledger_id, who, ", ".join(bookies), err,
    )  # fmt: skip
