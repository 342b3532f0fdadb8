"""Waiting on rebuilding during a failover run: a wiped bookie's copies re-made, and everything
under-replicated rebuilt before the final audit of the copies."""

from __future__ import annotations

import asyncio
import contextlib

from core import errors, runtime
from core.settings.rebuild_settings import CHECK_NOW_ZNODE
from global_meta import MetaSession
from ledger import LedgerMetadataStore, UnderReplication, VersionedMetadata

POLL_S = 1.0


async def rebuilt(store: MetaSession, bookie_id: str, bound_s: float) -> str:
    """Waits until no ledger's metadata names the bookie (its copies re-made elsewhere), at
    most `bound_s`; says how long it took, or what is left."""
    started = runtime.monotonic()

    async def names_it(versioned: VersionedMetadata) -> bool:
        return any(bookie_id in e.bookies for e in versioned.metadata.ensembles)

    ledgers = LedgerMetadataStore(store)
    while True:
        named = await ledgers.visit(names_it)
        left = [ledger_id for ledger_id, it_does in named.items() if it_does]
        took = runtime.monotonic() - started
        if not left:
            return f"{bookie_id} rebuilt in {took:.1f} s"
        if took > bound_s:
            return f"{bookie_id}: {len(left)} ledgers still name it after {took:.0f} s"
        await asyncio.sleep(POLL_S)


async def settle_rebuilding(store: MetaSession, bound_s: float) -> str:
    """Asks the auditor for a full check and waits, at most `bound_s`, until it is done and
    nothing is marked under-replicated; says how it ended (the final audit judges the rest)."""
    started = runtime.monotonic()
    with contextlib.suppress(errors.NodeExistsError):
        await store.create(CHECK_NOW_ZNODE, make_parents=True)
    under = UnderReplication(store)
    while True:
        checked = await store.exists(CHECK_NOW_ZNODE) is None
        marked = await under.marked() if checked else []
        took = runtime.monotonic() - started
        if checked and not marked:
            return f"full check done and nothing under-replicated after {took:.1f} s"
        if took > bound_s:
            state = f"{len(marked)} ledgers still marked" if checked else "no check done"
            return f"after {took:.0f} s: {state}"
        await asyncio.sleep(POLL_S)
