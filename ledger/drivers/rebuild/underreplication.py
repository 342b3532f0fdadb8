"""Under-replicated ledgers in ZooKeeper, in BookKeeper's layout (ledger.codecs.underreplication):
marking, listing, claiming, marking done.

- **mark** creates the ledger's marker, or adds the bookies to the one there by
  compare-and-set (a concurrent mark or done is retried);
- **claim** takes the ledger's ephemeral lock, then reads the marker's version: the claim
  lasts as long as the claimant's ZooKeeper session, so a worker that dies frees its ledgers;
- **done** deletes the marker at the version claimed: a marker re-marked during the rebuild
  (another bookie lost meanwhile) survives it and is claimed again; then the empty levels
  above it are pruned and the lock released.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from core import errors, runtime
from global_meta import ANY_VERSION, MetaSession
from ledger.codecs.underreplication import (
    Layout,
    Marker,
    check_layout,
    decode_full_check_time,
    decode_lock,
    decode_marker,
    encode_full_check_time,
    encode_layout,
    encode_lock,
    encode_marker,
    is_quarter,
    ledger_of_marker,
)

MARK_ATTEMPTS_MAX = 16  # compare-and-set races a mark retries (each one another marker change)
QUARTER_LEVELS = 4


@dataclass(frozen=True, slots=True)
class Claim:
    ledger_id: int
    marker: Marker
    version: int  # the marker's version when claimed: done deletes at this version


class UnderReplication:
    """The under-replication state of one cluster, over one metadata session."""

    def __init__(self, store: MetaSession, layout: Layout | None = None) -> None:
        self._store = store
        self.layout = layout or Layout()

    async def ensure_layout(self) -> None:
        """Creates the layout when missing, as BookKeeper does; refuses a foreign one."""
        layout = self.layout
        with contextlib.suppress(errors.NodeExistsError):
            await self._store.create(layout.base, make_parents=True)
        try:
            await self._store.create(layout.layout_node, encode_layout())
        except errors.NodeExistsError:
            data, _ = await self._store.get(layout.layout_node)
            check_layout(data, layout.layout_node)
        for path in (layout.markers, layout.locks):
            with contextlib.suppress(errors.NodeExistsError):
                await self._store.create(path)

    # ------------------------------------------------------------------------ markers

    async def mark(self, ledger_id: int, replicas: tuple[str, ...]) -> bool:
        """Marks the ledger under-replicated for `replicas`; False when its marker already
        named every one of them."""
        path = self.layout.marker(ledger_id)
        for _ in range(MARK_ATTEMPTS_MAX):
            now_ms = runtime.wall_ms()
            try:
                data = encode_marker(Marker(tuple(dict.fromkeys(replicas)), now_ms))
                await self._store.create(path, data, make_parents=True)
                return True
            except errors.NodeExistsError:
                pass
            except errors.NoNodeError:
                continue  # a level made for it was pruned by a done meanwhile: again
            try:
                data, stat = await self._store.get(path)
                merged = decode_marker(data, path).merged(replicas, now_ms)
                if merged is None:
                    return False
                await self._store.set(path, encode_marker(merged), version=stat.version)
                return True
            except (errors.NoNodeError, errors.BadVersionError):
                continue  # done or re-marked meanwhile: look again
        raise errors.MetadataError(
            f"ledger {ledger_id}: its marker {path} kept changing over {MARK_ATTEMPTS_MAX} attempts"
        )

    async def read(self, ledger_id: int) -> tuple[Marker, int] | None:
        """The ledger's marker and its version; None when it is not marked."""
        path = self.layout.marker(ledger_id)
        try:
            data, stat = await self._store.get(path)
        except errors.NoNodeError:
            return None
        return decode_marker(data, path), stat.version

    async def marked(self) -> list[int]:
        """Every marked ledger id, ascending (a walk of the four hex levels)."""
        found: list[int] = []
        level = [self.layout.markers]
        for _ in range(QUARTER_LEVELS):
            below = []
            for parent in level:
                below += [f"{parent}/{n}" for n in await self._children(parent) if is_quarter(n)]
            level = below
        for parent in level:
            for name in await self._children(parent):
                ledger_id = ledger_of_marker(name)
                if ledger_id is not None:
                    found.append(ledger_id)
        return sorted(found)

    async def _children(self, path: str) -> list[str]:
        try:
            return await self._store.children(path)
        except errors.NoNodeError:
            return []  # pruned by a done meanwhile

    # ------------------------------------------------------------------------- claims

    async def claim(self, ledger_id: int, holder: str) -> Claim | None:
        """The ledger's claim for `holder`; None when another holds it or it is not marked."""
        lock = self.layout.lock(ledger_id)
        try:
            await self._store.create(lock, encode_lock(holder), ephemeral=True)
        except errors.NodeExistsError:
            return None
        try:
            found = await self.read(ledger_id)
        except BaseException:
            await self._unlock(ledger_id)
            raise
        if found is None:
            await self._unlock(ledger_id)
            return None
        marker, version = found
        return Claim(ledger_id, marker, version)

    async def claim_any(self, holder: str, skip: frozenset[int] = frozenset()) -> Claim | None:
        """A claim on some marked ledger not in `skip`, picked at random so that workers in
        many regions spread over the marked ledgers; None when every one is held."""
        candidates = [i for i in await self.marked() if i not in skip]
        held = set(await self.claimed())
        free = [i for i in candidates if i not in held]
        runtime.new_rng().shuffle(free)
        for ledger_id in free:
            claim = await self.claim(ledger_id, holder)
            if claim is not None:
                return claim
        return None

    async def claimed(self) -> dict[int, str]:
        """Held claims: ledger id → holder."""
        held: dict[int, str] = {}
        for name in await self._children(self.layout.locks):
            ledger_id = ledger_of_marker(name)
            if ledger_id is None:
                continue
            path = f"{self.layout.locks}/{name}"
            try:
                data, _ = await self._store.get(path)
            except errors.NoNodeError:
                continue
            held[ledger_id] = decode_lock(data, path)
        return held

    async def done(self, claim: Claim) -> bool:
        """Deletes the marker at the claimed version and releases the claim; False when it
        was re-marked meanwhile (it stays, to be claimed again)."""
        try:
            await self._store.delete(self.layout.marker(claim.ledger_id), version=claim.version)
            removed = True
        except errors.NoNodeError:
            removed = True
        except errors.BadVersionError:
            removed = False
        if removed:
            await self._prune(claim.ledger_id)
        await self._unlock(claim.ledger_id)
        return removed

    async def release(self, claim: Claim) -> None:
        """Gives the claim up without marking anything done."""
        await self._unlock(claim.ledger_id)

    async def _unlock(self, ledger_id: int) -> None:
        with contextlib.suppress(errors.NoNodeError):
            await self._store.delete(self.layout.lock(ledger_id), version=ANY_VERSION)

    async def _prune(self, ledger_id: int) -> None:
        """Removes the marker's empty hex levels, deepest first, stopping at one in use."""
        path = self.layout.marker_parent(ledger_id)
        for _ in range(QUARTER_LEVELS):
            try:
                await self._store.delete(path, version=ANY_VERSION)
            except (errors.NotEmptyError, errors.NoNodeError):
                return
            path = path.rsplit("/", 1)[0]

    # --------------------------------------------------------------------- the switch

    async def disabled(self) -> bool:
        return await self._store.exists(self.layout.disable_node) is not None

    async def set_disabled(self, disabled: bool) -> None:
        """Pauses (or resumes) rebuilding cluster-wide, as `BookieShell autorecovery -disable`."""
        if disabled:
            with contextlib.suppress(errors.NodeExistsError):
                await self._store.create(self.layout.disable_node)
        else:
            with contextlib.suppress(errors.NoNodeError):
                await self._store.delete(self.layout.disable_node, version=ANY_VERSION)

    # ----------------------------------------------------------------------- full checks

    async def last_full_check_ms(self) -> int | None:
        """When the last full check of every ledger ended (ms since the epoch), by any
        auditor, globelog's or BookKeeper's; None when none is recorded."""
        node = self.layout.full_check_node
        try:
            data, _ = await self._store.get(node)
        except errors.NoNodeError:
            return None
        return decode_full_check_time(data, node)

    async def full_check_ended(self, ended_ms: int) -> None:
        data = encode_full_check_time(ended_ms)
        try:
            await self._store.set(self.layout.full_check_node, data, version=ANY_VERSION)
        except errors.NoNodeError:
            with contextlib.suppress(errors.NodeExistsError):
                await self._store.create(self.layout.full_check_node, data, make_parents=True)
