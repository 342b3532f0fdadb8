"""What `globelog rebuild status` shows: every under-replicated ledger (its marker, who holds
its claim, the entries and bytes still to copy), the rebuilders with their rates, the
auditor, and an estimate of the time left."""

from __future__ import annotations

import asyncio
from typing import Any

from global_meta import MetaSession
from ledger import (
    LedgerClient,
    NoSuchLedgerMetadataError,
    UnderReplication,
    decode_vote,
    pending_copies,
)
from rebuild.service import read_rebuilders

# marked ledgers looked up at once (their marker and metadata: two ZooKeeper reads each, on a
# WAN a round trip each, so thousands marked would take minutes one by one)
LOOKUPS_AT_ONCE = 16


async def rebuild_status(store: MetaSession, client: LedgerClient) -> dict[str, Any]:
    under = UnderReplication(store)
    claims = await under.claimed()
    slots = asyncio.Semaphore(LOOKUPS_AT_ONCE)

    async def describe(ledger_id: int) -> dict[str, Any] | None:
        async with slots:
            found = await under.read(ledger_id)
            if found is None:
                return None  # done meanwhile
            marker, _ = found
            entry: dict[str, Any] = {
                "ledger_id": ledger_id,
                "replicas": list(marker.replicas),
                "marked_at_ms": marker.ctime_ms,
                "claimed_by": claims.get(ledger_id),
            }
            try:
                metadata = (await client.metadata(ledger_id)).metadata
            except NoSuchLedgerMetadataError:
                entry.update(entries=0, bytes=0, deferred_fragments=0, deleted=True)
            else:
                entry.update(pending_copies(metadata, marker.replicas))
            return entry

    described = await asyncio.gather(*(describe(i) for i in await under.marked()))
    ledgers = [entry for entry in described if entry is not None]
    rebuilders = await read_rebuilders(store)
    rate = sum(r.get("bytes_per_s", 0) for r in rebuilders)
    pending_bytes = sum(e["bytes"] for e in ledgers)
    auditor = None
    if await store.exists(under.layout.election) is not None:
        data, _ = await store.get(under.layout.election)
        auditor = decode_vote(data, under.layout.election) if data else None
    return {
        "under_replicated_ledgers": len(ledgers),
        "entries": sum(e["entries"] for e in ledgers),
        "bytes": pending_bytes,
        "bytes_per_s": rate,
        "eta_s": round(pending_bytes / rate, 1) if rate > 0 and pending_bytes else None,
        "disabled": await under.disabled(),
        "auditor": auditor,
        "ledgers": ledgers,
        "rebuilders": rebuilders,
    }


def format_status(status: dict[str, Any]) -> str:
    lines = [
        f"under-replicated ledgers: {status['under_replicated_ledgers']} "
        f"({status['entries']} entries, {status['bytes']} bytes to copy)",
        f"rate: {status['bytes_per_s'] / 1e6:.1f} MB/s; "
        + (f"about {status['eta_s']} s left" if status["eta_s"] is not None else "no estimate"),
        f"auditor: {status['auditor'] or '(none elected)'}"
        + ("; rebuilding is DISABLED" if status["disabled"] else ""),
    ]
    for r in status["rebuilders"]:
        shares = r.get("pace_shares", 1)
        shared = f", its 1/{shares} of the shared pace" if shares > 1 else ""
        lines.append(
            f"  rebuilder {r['name']} ({r['region']}): {r['ledgers_rebuilt']} ledgers, "
            f"{r['bytes_copied']} bytes rebuilt, {r['bytes_per_s'] / 1e6:.1f} MB/s "
            f"(may copy at {r.get('pace_bytes_s', 0) / 1e6:.1f}{shared}), "
            f"in progress {r['in_progress']}, failed {r['ledgers_failed']}"
        )
    for e in status["ledgers"]:
        claim = f", claimed by {e['claimed_by']}" if e["claimed_by"] else ""
        lines.append(
            f"  ledger {e['ledger_id']}: copies on {', '.join(e['replicas'])}; "
            f"{e['entries']} entries, {e['bytes']} bytes{claim}"
        )
    return "\n".join(lines)
