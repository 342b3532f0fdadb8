"""A ledger's metadata as a plain report, and the placement audit of each of its ensembles
against the published bookie locations (the durability rule, I6)."""

from __future__ import annotations

from typing import Any

from core.routes import TOPOLOGY_ZNODE, decode_published
from global_meta.session import MetaSession
from ledger.drivers.client import LedgerClient
from ledger.drivers.context import MIN_REGIONS_KEY, LedgerConfig
from ledger.drivers.metadata_store import LedgerMetadataStore, VersionedMetadata
from ledger.drivers.rebuild import ReplicaGap
from placement import Adherence, LocatedBookie, audit_ensemble


def describe_ledger(versioned: VersionedMetadata) -> dict[str, Any]:
    md = versioned.metadata
    custom = {k: v.decode(errors="replace") for k, v in md.custom_metadata}
    return {
        "ledger_id": versioned.ledger_id,
        "version": versioned.version,
        "state": md.state.name,
        "ensemble_size": md.ensemble_size,
        "write_quorum": md.write_quorum,
        "ack_quorum": md.ack_quorum,
        "last_entry_id": md.last_entry_id,
        "length": md.length,
        "digest_type": md.digest_type.name,
        "ensembles": [
            {"first_entry_id": e.first_entry_id, "bookies": list(e.bookies)} for e in md.ensembles
        ],
        "custom_metadata": custom,
    }


async def audit_ledgers(
    store: MetaSession, ledger_ids: list[int], min_regions_default: int
) -> tuple[list[dict[str, Any]], bool]:
    """Audits every ensemble of each ledger against the published bookie locations; (reports,
    whether all adhere)."""
    reports = []
    all_adhere = True
    data, _ = await store.get(TOPOLOGY_ZNODE)
    published = decode_published(data, TOPOLOGY_ZNODE)
    locations = [LocatedBookie(b.bookie_id, b.region, b.rack) for b in published.bookies]
    ledgers = LedgerMetadataStore(store)
    for ledger_id in ledger_ids:
        versioned = await ledgers.read(ledger_id)
        md = versioned.metadata
        stored = dict(md.custom_metadata).get(MIN_REGIONS_KEY)
        min_regions = int(stored.decode()) if stored else min_regions_default
        entry = describe_ledger(versioned)
        entry["min_regions_for_durability"] = min_regions
        entry["audit"] = []
        for ensemble in md.ensembles:
            report = audit_ensemble(
                ensemble.bookies, locations, md.write_quorum, md.ack_quorum, min_regions
            )
            all_adhere &= report.adherence is not Adherence.FAIL
            entry["audit"].append(
                {
                    "first_entry_id": ensemble.first_entry_id,
                    "adherence": report.adherence.value,
                    "text": report.describe(),
                }
            )
        reports.append(entry)
    return reports, all_adhere


async def audit_replicas(
    store: MetaSession, config: LedgerConfig, ledger_ids: list[int]
) -> list[tuple[int, ReplicaGap]]:
    """Every settled fragment of the ledgers whose bookie does not hold (or cannot serve)
    the first and last entries it should: (ledger id, gap)."""
    async with await LedgerClient.connect(store, config) as client:
        gaps = await client.visit_ledgers(
            lambda versioned: client.replica_gaps(versioned.ledger_id, versioned), ledger_ids
        )
    return [(ledger_id, gap) for ledger_id, found in gaps.items() for gap in found]
