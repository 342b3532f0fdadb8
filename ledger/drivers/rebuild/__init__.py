"""Re-making a ledger's lost copies: the fragments a bookie held, copied to a replacement.

A fragment is the span of entries one ensemble served, seen from one position of that
ensemble: the entries whose write set includes the position (all of them when the write
quorum is the ensemble). Rebuilding a fragment:

1. placement picks the replacement, with the ledger's own replication and durability rule,
   as an ensemble change would (every write set keeps its regions, racks spread, recently
   failed bookies last);
2. each entry is read from a surviving copy, the nearest first (placement's read order:
   local rack, local region, remote), in batches, and its digest checked before it is sent
   on: a corrupt copy is never multiplied;
3. the entries are added to the replacement as recovery adds (accepted past a fence, with
   the ledger's master key), byte for byte as the writer packed them;
4. the first and last entries copied are read back from the replacement and checked;
5. the member is replaced in that ensemble of the ledger metadata by compare-and-set. A
   writer that changes the metadata at the same time (an ensemble change, a close) loses the
   race, re-reads and keeps the replacement; if the member was replaced already, nothing
   more is done.

The last ensemble of a ledger that is still open belongs to its writer: new entries move off
a lost bookie by the writer's ensemble change, and the span written before it becomes an
earlier ensemble, which is closed and can be copied. So such fragments are only reported as
deferred, and nothing is fenced from under a live writer. (A segment ledger whose stream has
no owner any more is closed by the rebuild worker first, and then copied whole:
rebuild/worker.py.)

Every step has a bound: the bookie calls have their timeouts, the metadata writes their
attempts, the copy loop a fixed number of entries.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from core.errors import GlobelogError
from ledger.codecs.entry import EntryCodec, master_key
from ledger.codecs.metadata import Ensemble, LedgerMetadata, LedgerState, write_set_indices
from ledger.codes import INVALID_ENTRY_ID
from ledger.drivers.context import LedgerContext, update_metadata
from ledger.drivers.metadata_store import VersionedMetadata
from ledger.errors import (
    BookieUnreachableError,
    DigestMismatchError,
    EntryUnavailableError,
    LedgerHandleError,
    NoSuchEntryError,
    NoSuchLedgerError,
)
from placement import Adherence

log = logging.getLogger(__name__)

COPY_BATCH_ENTRIES = 64  # entries read by one batched read and added together
COPY_BATCH_BYTES = 4 * 1024 * 1024  # ... and at most this many bytes of them
# A bookie's answers that say its copy is gone or damaged (not that it could not answer).
LACKS_COPY = (NoSuchEntryError, NoSuchLedgerError, DigestMismatchError)


@dataclass(frozen=True, slots=True)
class Fragment:
    """The entries `first_entry_id..last_entry_id` (inclusive; empty when last < first) that
    position `position` of the ensemble starting at `first_entry_id` stores."""

    first_entry_id: int
    last_entry_id: int
    position: int
    bookie_id: str

    def entries(self, ensemble_size: int, write_quorum: int) -> Iterable[int]:
        """The entry ids this position stores."""
        for entry_id in range(self.first_entry_id, self.last_entry_id + 1):
            if self.position in write_set_indices(entry_id, ensemble_size, write_quorum):
                yield entry_id

    def describe(self) -> str:
        span = (
            "no entries"
            if self.last_entry_id < self.first_entry_id
            else f"entries {self.first_entry_id}..{self.last_entry_id}"
        )
        return f"{self.bookie_id} at position {self.position} ({span})"


@dataclass(frozen=True, slots=True)
class FragmentPlan:
    copyable: tuple[Fragment, ...]
    deferred: tuple[Fragment, ...]  # the open last ensemble's: its writer's


def plan_fragments(metadata: LedgerMetadata, replicas: Collection[str]) -> FragmentPlan:
    """Every fragment of a member in `replicas`, split into what can be copied now and what
    its writer still owns."""
    copyable: list[Fragment] = []
    deferred: list[Fragment] = []
    closed = metadata.state is LedgerState.CLOSED
    ensembles = metadata.ensembles
    for index, ensemble in enumerate(ensembles):
        is_last = index == len(ensembles) - 1
        if is_last:
            last = metadata.last_entry_id if closed else INVALID_ENTRY_ID
        else:
            last = ensembles[index + 1].first_entry_id - 1
        for position, bookie in enumerate(ensemble.bookies):
            if bookie not in replicas:
                continue
            fragment = Fragment(ensemble.first_entry_id, last, position, bookie)
            (deferred if is_last and not closed else copyable).append(fragment)
    return FragmentPlan(tuple(copyable), tuple(deferred))


def pending_copies(metadata: LedgerMetadata, replicas: tuple[str, ...]) -> dict[str, int]:
    """Entries still to copy for the marker's bookies and their bytes (estimated from the
    ledger's mean entry size when it is closed; an open ledger's length is not known yet)."""
    plan = plan_fragments(metadata, replicas)
    e, w = metadata.ensemble_size, metadata.write_quorum
    entries = sum(len(list(f.entries(e, w))) for f in plan.copyable)
    closed = metadata.state is LedgerState.CLOSED and metadata.last_entry_id >= 0
    mean = metadata.length / (metadata.last_entry_id + 1) if closed else 0
    return {
        "entries": entries,
        "bytes": round(entries * mean),
        "deferred_fragments": len(plan.deferred),
    }


@dataclass(frozen=True, slots=True)
class Rebuilt:
    fragment: Fragment
    replacement: str
    entries: int
    bytes: int


@dataclass(frozen=True, slots=True)
class LedgerRebuild:
    """What one pass over a ledger did."""

    ledger_id: int
    rebuilt: tuple[Rebuilt, ...]
    deferred: tuple[Fragment, ...]
    gone: bool = False  # the ledger was deleted meanwhile: nothing to rebuild

    @property
    def complete(self) -> bool:
        return not self.deferred

    @property
    def bytes(self) -> int:
        return sum(r.bytes for r in self.rebuilt)

    @property
    def entries(self) -> int:
        return sum(r.entries for r in self.rebuilt)


class Pace(Protocol):
    """How fast a rebuild copies (rebuild.pacing): awaited with each batch's bytes before it
    is sent, and told how long the batch's first add to its bookie took."""

    async def __call__(self, size: int) -> None: ...

    def observe(self, bookie: str, seconds: float) -> None: ...

    @property
    def batch_bytes(self) -> int:
        """How many bytes one batched read may bring now (reads ahead are not paced: a slow
        pace reads in small batches, so many ledgers at once do not read a burst)."""
        ...


class _NoPacing:
    async def __call__(self, size: int) -> None:
        return None

    def observe(self, bookie: str, seconds: float) -> None:
        return None

    @property
    def batch_bytes(self) -> int:
        return COPY_BATCH_BYTES


no_pacing: Pace = _NoPacing()


async def rebuild_ledger(
    context: LedgerContext,
    versioned: VersionedMetadata,
    replicas: Collection[str],
    pace: Pace = no_pacing,
) -> LedgerRebuild:
    """Re-makes every copyable fragment of `replicas` in the ledger, one fragment at a time.
    Raises the first fragment's failure (a later pass starts again from the metadata, so a
    fragment moved is not copied twice).

    Each fragment of a marked bookie, by what the bookie is now:
    - not writable (gone from the registry, read-only, decommissioned), or in an ensemble
      that breaks the durability rule: the fragment moves, its copies made on a bookie
      placement picks and the metadata naming it;
    - writable, and answering that it lacks the fragment's first or last entry (a disk
      replaced under the same id, a bookie down while entries were written): repaired in
      place, the entries added back to it, no metadata change;
    - writable and holding its copies: nothing to do (the mark is stale: the bookie came
      back, or the decommission was undone).
    The open last ensemble's span of a writable bookie is its writer's to look after.
    """
    metadata = versioned.metadata
    writable = context.placement.cluster.writable
    replication = context.replication_of(metadata)
    plan = plan_fragments(metadata, replicas)
    rebuilt: list[Rebuilt] = []
    failed_targets: set[str] = set()
    for fragment in plan.copyable:
        done: Rebuilt | None = None
        ensemble = _ensemble_at(metadata, fragment.first_entry_id).bookies
        breaks_rule = context.placement.audit(ensemble, replication).adherence is Adherence.FAIL
        if fragment.bookie_id not in writable or breaks_rule:
            done, versioned = await _rebuild_fragment(
                context, versioned, fragment, frozenset(replicas), failed_targets, pace
            )
            metadata = versioned.metadata
        elif await _lacks_copies(context, versioned, fragment):
            done = await _repair_in_place(context, versioned, fragment, frozenset(replicas), pace)
        if done is not None:
            rebuilt.append(done)
    deferred = tuple(f for f in plan.deferred if f.bookie_id not in writable)
    return LedgerRebuild(versioned.ledger_id, tuple(rebuilt), deferred)


async def _lacks_copies(
    context: LedgerContext, versioned: VersionedMetadata, fragment: Fragment
) -> bool:
    """Whether the fragment's bookie answers that it lacks its first or last entry there
    (False: it answered both). A bookie that cannot be asked is neither: the pass fails with
    why, and the ledger is tried again later (by then a dead bookie is out of the registry
    and its fragments move)."""
    gaps = await replica_gaps(context, versioned.ledger_id, versioned.metadata, (fragment,))
    if any(g.missing for g in gaps):
        return True
    if gaps:
        raise BookieUnreachableError(
            f"ledger {versioned.ledger_id}: {fragment.describe()} is registered but could not "
            f"be asked for its copies: {gaps[0].why}"
        )
    return False


async def _repair_in_place(
    context: LedgerContext,
    versioned: VersionedMetadata,
    fragment: Fragment,
    replicas: frozenset[str],
    pace: Pace,
) -> Rebuilt:
    entries, size = await copy_fragment(
        context, versioned.ledger_id, versioned.metadata, fragment, fragment.bookie_id,
        replicas, pace,
    )  # fmt: skip
    log.info(
        "ledger %d: repaired %s in place (%d entries, %d bytes)",
        versioned.ledger_id, fragment.describe(), entries, size,
    )  # fmt: skip
    return Rebuilt(fragment, fragment.bookie_id, entries, size)


async def _rebuild_fragment(
    context: LedgerContext,
    versioned: VersionedMetadata,
    fragment: Fragment,
    replicas: frozenset[str],
    failed_targets: set[str],
    pace: Pace,
) -> tuple[Rebuilt | None, VersionedMetadata]:
    metadata = versioned.metadata
    ensemble = _ensemble_at(metadata, fragment.first_entry_id)
    if ensemble.bookies[fragment.position] != fragment.bookie_id:
        return None, versioned  # replaced already (an earlier fragment's pass, another worker)
    replication = context.replication_of(metadata)
    chosen = context.placement.replace_bookie(
        replication,
        ensemble.bookies,
        fragment.bookie_id,
        excluded=replicas | failed_targets,
        now_s=context.clock(),
    )
    target = chosen[fragment.position]
    try:
        entries, size = await copy_fragment(
            context, versioned.ledger_id, metadata, fragment, target, replicas, pace
        )
    except GlobelogError:
        failed_targets.add(target)
        # placement keeps it out of the next replacements for its health TTL (a retry of
        # this ledger, the other ledgers of this worker)
        context.placement.record_failure(target, context.clock())
        raise
    versioned = await update_metadata(
        context.metadata, versioned, _replacing(versioned.ledger_id, fragment, target)
    )
    log.info(
        "ledger %d: re-made %s on %s (%d entries, %d bytes)",
        versioned.ledger_id,
        fragment.describe(),
        target,
        entries,
        size,
    )
    return Rebuilt(fragment, target, entries, size), versioned


def _ensemble_at(metadata: LedgerMetadata, first_entry_id: int) -> Ensemble:
    for ensemble in metadata.ensembles:
        if ensemble.first_entry_id == first_entry_id:
            return ensemble
    starts = [e.first_entry_id for e in metadata.ensembles]
    raise LedgerHandleError(f"no ensemble starts at entry {first_entry_id}; starts: {starts}")


def _replacing(
    ledger_id: int, fragment: Fragment, target: str
) -> Callable[[LedgerMetadata], LedgerMetadata]:
    """The metadata change: `target` in the fragment's place, on whatever metadata is newest.
    Refused when the newest no longer has the fragment's member there (someone replaced it:
    our copy is then a spare, reclaimed by the bookies' garbage collector)."""

    def change(metadata: LedgerMetadata) -> LedgerMetadata:
        history = list(metadata.ensembles)
        for index, ensemble in enumerate(history):
            if ensemble.first_entry_id != fragment.first_entry_id:
                continue
            if ensemble.bookies[fragment.position] != fragment.bookie_id:
                raise LedgerHandleError(
                    f"ledger {ledger_id}: {fragment.describe()} was replaced meanwhile by "
                    f"{ensemble.bookies[fragment.position]}"
                )
            bookies = list(ensemble.bookies)
            bookies[fragment.position] = target
            history[index] = Ensemble(ensemble.first_entry_id, tuple(bookies))
            return dataclasses.replace(metadata, ensembles=tuple(history))
        raise LedgerHandleError(
            f"ledger {ledger_id}: the ensemble of {fragment.describe()} is gone from its metadata"
        )

    return change


async def copy_fragment(
    context: LedgerContext,
    ledger_id: int,
    metadata: LedgerMetadata,
    fragment: Fragment,
    target: str,
    replicas: Collection[str],
    pace: Pace = no_pacing,
) -> tuple[int, int]:
    """Copies the fragment's entries to `target` and checks them there; (entries, bytes).

    The next batch is read while the current one is added (one read ahead: two batches held
    at most), so a fragment of many batches costs about one round trip per batch, not two."""
    size_e, quorum = metadata.ensemble_size, metadata.write_quorum
    wanted = list(fragment.entries(size_e, quorum))
    if not wanted:
        return 0, 0
    ensemble = _ensemble_at(metadata, fragment.first_entry_id).bookies
    codec = EntryCodec(ledger_id, metadata.digest_type, metadata.password)
    key = master_key(metadata.password)
    failed_sources: set[str] = set(replicas)

    def read_from(index: int) -> asyncio.Task[list[tuple[int, bytes]]]:
        return asyncio.get_running_loop().create_task(
            _read_batch(
                context,
                ledger_id,
                ensemble,
                quorum,
                wanted,
                index,
                codec,
                failed_sources,
                pace.batch_bytes,
            )
        )

    copied_bytes = 0
    index = 0
    reading = read_from(0)
    try:
        while index < len(wanted):
            batch = await reading
            index += len(batch)
            if index < len(wanted):
                reading = read_from(index)
            size = sum(len(packet) for _, packet in batch)
            await pace(size)
            # every add of the batch ends (each within the bookie request timeout) before
            # the first failure, if any, is raised as itself
            answers, first_s = await _add_batch(context, target, ledger_id, key, batch)
            failed = next((a for a in answers if isinstance(a, BaseException)), None)
            if failed is not None:
                raise failed
            pace.observe(target, first_s)
            copied_bytes += size
    finally:
        if not reading.done():  # a failure or a cancellation: the read ahead ends with it
            reading.cancel()
            await asyncio.wait({reading})
        if not reading.cancelled():
            reading.exception()  # retrieved: raised above if it mattered

    async def check(entry_id: int) -> None:  # within the bookie request timeout
        response = await context.bookies.read_entry(target, ledger_id, entry_id)
        codec.decode_entry(response.body or b"", entry_id)  # raises unless intact

    # the first and last read back at once; both end before a failure is raised as itself
    checked = await asyncio.gather(
        *(check(e) for e in {wanted[0], wanted[-1]}), return_exceptions=True
    )
    failed = next((c for c in checked if isinstance(c, BaseException)), None)
    if failed is not None:
        raise failed
    return len(wanted), copied_bytes


async def _add_batch(
    context: LedgerContext, target: str, ledger_id: int, key: bytes, batch: list[tuple[int, bytes]]
) -> tuple[Sequence[object], float]:
    """Adds the batch's entries to `target` at once: every answer (a failure as itself), and
    the seconds its first answer took (what the pacer reads queueing from)."""
    loop = asyncio.get_running_loop()
    sent = loop.time()
    first: list[float] = []

    def answered(_: object) -> None:
        if not first:
            first.append(loop.time() - sent)

    adds = [
        loop.create_task(
            context.bookies.add_entry(target, ledger_id, entry_id, key, packet, recovery=True)
        )
        for entry_id, packet in batch
    ]
    for add in adds:
        add.add_done_callback(answered)
    answers = await asyncio.gather(*adds, return_exceptions=True)
    return answers, first[0]


async def _read_batch(
    context: LedgerContext,
    ledger_id: int,
    ensemble: tuple[str, ...],
    quorum: int,
    wanted: list[int],
    index: int,
    codec: EntryCodec,
    failed_sources: set[str],
    max_bytes: int = COPY_BATCH_BYTES,
) -> list[tuple[int, bytes]]:
    """Verified packets of `wanted[index]` and the wanted entries right after it that one
    source returns in one batched read; the nearest source holding the entry first, the next
    one after a failure (an unreadable or corrupt copy)."""
    first = wanted[index]
    holders = [
        ensemble[i]
        for i in write_set_indices(first, len(ensemble), quorum)
        if ensemble[i] not in failed_sources
    ]
    order = context.read_order(holders, context.clock()) if holders else ()
    errors: list[str] = []
    for source in order:
        count = _span(wanted, index)
        try:
            packets = await context.bookies.batch_read(source, ledger_id, first, count, max_bytes)
            verified = []
            for offset, packet in enumerate(packets):
                codec.decode_entry(packet, first + offset)  # raises on a corrupt copy
                verified.append((first + offset, packet))
            return verified
        except GlobelogError as err:
            failed_sources.add(source)
            if not isinstance(err, LACKS_COPY):
                context.placement.record_failure(source, context.clock())
            errors.append(f"{source}: {err}")
    raise EntryUnavailableError(
        f"ledger {ledger_id} entry {first}: no surviving copy could be read "
        f"({'; '.join(errors) or 'no copy outside the bookies being replaced'})"
    )


@dataclass(frozen=True, slots=True)
class ReplicaGap:
    """A fragment whose bookie does not hold a copy it should."""

    fragment: Fragment
    why: str
    missing: bool  # the bookie answered it lacks the copy (not: it could not be asked)


async def replica_gaps(
    context: LedgerContext,
    ledger_id: int,
    metadata: LedgerMetadata,
    fragments: Collection[Fragment] | None = None,
) -> list[ReplicaGap]:
    """Asks each member of every ensemble whose span is settled (all of a closed ledger, all
    but the last of an open one) for the first and last entries it should hold there: a
    bookie that answers it has no such entry or ledger lost its copy (a wiped disk brought
    back under the same id, which the registry cannot show). An unreachable bookie is a gap
    too; `why` says which. Nothing is read beyond those two entries per fragment."""
    if fragments is None:
        members = {b for e in metadata.ensembles for b in e.bookies}
        fragments = plan_fragments(metadata, members).copyable
    gaps: list[ReplicaGap] = []
    codec = EntryCodec(ledger_id, metadata.digest_type, metadata.password)
    for fragment in fragments:
        held = list(fragment.entries(metadata.ensemble_size, metadata.write_quorum))
        for entry_id in dict.fromkeys((held[0], held[-1]) if held else ()):
            try:
                response = await context.bookies.read_entry(fragment.bookie_id, ledger_id, entry_id)
                codec.decode_entry(response.body or b"", entry_id)
            except GlobelogError as err:
                missing = isinstance(err, LACKS_COPY)
                gaps.append(ReplicaGap(fragment, f"entry {entry_id}: {err.code}: {err}", missing))
                break
    return gaps


def _span(wanted: list[int], index: int) -> int:
    """How many consecutive entry ids from `wanted[index]` are wanted (at most a batch)."""
    count = 1
    while (
        count < COPY_BATCH_ENTRIES
        and index + count < len(wanted)
        and wanted[index + count] == wanted[index] + count
    ):
        count += 1
    return count
