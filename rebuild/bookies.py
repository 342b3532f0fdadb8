"""Bookies as an operator sees them (`globelog bookie list`) and taking one out of service
(`globelog bookie decommission NAME`).

Decommissioning writes `/globelog/decommission/<bookie id>`: ledger clients stop placing new
copies on the bookie at once (it counts as read-only: it still serves its copies), and the
auditor marks every ledger with a fragment on it without waiting for any delay. The rebuild
workers then re-make those copies elsewhere. The bookie is safe to stop when no ledger's
metadata names it any more; a ledger still being written keeps it in its open ensemble until
the writer's roll or release closes that ensemble.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from dataclasses import dataclass
from typing import Any

from core import errors
from core.settings.rebuild_settings import DECOMMISSION_ZNODE
from core.topology import Topology
from global_meta import ANY_VERSION, MetaSession
from ledger import (
    LedgerClient,
    LedgerState,
    UnderReplication,
    VersionedMetadata,
    plan_fragments,
)

AVAILABLE = "/ledgers/available"


def bookie_id_of(topology: Topology, name: str) -> str:
    """The id of a bookie named by its topology name or its id; ConfigError otherwise."""
    for bookie in topology.bookies:
        if name in (bookie.name, bookie.bookie_id):
            return bookie.bookie_id
    known = [b.name for b in topology.bookies]
    raise errors.ConfigError(f"no bookie {name!r} in topology {topology.name!r}; bookies: {known}")


@dataclass(frozen=True, slots=True)
class Holdings:
    """What the ledgers' metadata places on each bookie."""

    ledgers: Counter[str]
    fragments: Counter[str]
    bytes: Counter[str]  # closed ledgers' entries times their mean entry size


async def holdings(client: LedgerClient) -> Holdings:
    ledgers: Counter[str] = Counter()
    fragments: Counter[str] = Counter()
    sizes: Counter[str] = Counter()

    async def count(versioned: VersionedMetadata) -> None:
        metadata = versioned.metadata
        members = {b for e in metadata.ensembles for b in e.bookies}
        ledgers.update(members)
        plan = plan_fragments(metadata, members)
        closed = metadata.state is LedgerState.CLOSED and metadata.last_entry_id >= 0
        mean = metadata.length / (metadata.last_entry_id + 1) if closed else 0.0
        e, w = metadata.ensemble_size, metadata.write_quorum
        for fragment in (*plan.copyable, *plan.deferred):
            fragments[fragment.bookie_id] += 1
            sizes[fragment.bookie_id] += round(len(list(fragment.entries(e, w))) * mean)

    await client.visit_ledgers(count)
    return Holdings(ledgers, fragments, sizes)


async def bookie_list(
    topology: Topology, store: MetaSession, client: LedgerClient
) -> list[dict[str, Any]]:
    """One row per bookie of the topology (and any unknown one the metadata names)."""
    registered = set(await store.children(AVAILABLE))
    read_only = (
        set(await store.children(f"{AVAILABLE}/readonly")) if "readonly" in registered else set()
    )
    leaving = await decommissioned(store)
    held = await holdings(client)
    under = UnderReplication(store)
    marked_for: Counter[str] = Counter()
    for ledger_id in await under.marked():
        found = await under.read(ledger_id)
        if found is not None:
            marked_for.update(found[0].replicas)
    rows = []
    named = {b.bookie_id: b for b in topology.bookies}
    for bookie_id in [*named, *sorted(set(held.ledgers) - set(named))]:
        bookie = named.get(bookie_id)
        if bookie_id in leaving:
            state = "decommissioning"
        elif bookie_id in read_only:
            state = "read-only"
        elif bookie_id in registered:
            state = "writable"
        else:
            state = "down"
        rows.append(
            {
                "name": bookie.name if bookie else "(not in the topology)",
                "bookie_id": bookie_id,
                "region": bookie.region if bookie else None,
                "rack": bookie.rack if bookie else None,
                "state": state,
                "ledgers": held.ledgers[bookie_id],
                "fragments": held.fragments[bookie_id],
                "bytes": held.bytes[bookie_id],
                "under_replicated": marked_for[bookie_id],
            }
        )
    return rows


async def decommissioned(store: MetaSession) -> set[str]:
    try:
        return set(await store.children(DECOMMISSION_ZNODE))
    except errors.NoNodeError:
        return set()


async def decommission(store: MetaSession, bookie_id: str, undo: bool = False) -> None:
    path = f"{DECOMMISSION_ZNODE}/{bookie_id}"
    if undo:
        with contextlib.suppress(errors.NoNodeError):
            await store.delete(path, version=ANY_VERSION)
        return
    with contextlib.suppress(errors.NodeExistsError):
        await store.create(path, make_parents=True)


async def ledgers_on(client: LedgerClient, bookie_id: str) -> list[int]:
    """The ledgers whose metadata still names the bookie."""

    async def names_it(versioned: VersionedMetadata) -> bool:
        return any(bookie_id in e.bookies for e in versioned.metadata.ensembles)

    return [
        ledger_id for ledger_id, named in (await client.visit_ledgers(names_it)).items() if named
    ]
