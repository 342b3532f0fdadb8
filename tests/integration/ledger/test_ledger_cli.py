"""`globelog ledger audit|show` against real metadata: BookKeeper's REPP would say "adheres"
to every ensemble; globelog names the write sets that break the durability rule."""

from __future__ import annotations

import json
import subprocess
import sys

from core.topology import Replication
from global_meta import MetaStore
from ledger.codecs.entry import DigestType
from ledger.codecs.metadata import Ensemble, LedgerMetadata
from ledger.drivers.client import LedgerClient
from ledger.drivers.context import MIN_REGIONS_KEY, LedgerConfig
from localcluster.controller import Cluster


def globelog(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [
        sys.executable,
        "-m",
        "cli.main",
        "ledger",
        "--topology",
        str(cluster.topology_path),
        *args,
    ]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)


async def test_audit_passes_placed_ledgers_and_names_bad_write_sets(cluster: Cluster) -> None:
    east = cluster.topology.region("us-east").bookies
    west = cluster.topology.region("us-west").bookies
    async with await MetaStore.of(cluster.topology) as store:
        config = LedgerConfig.of(cluster.topology, "us-east", min_regions_for_durability=2)
        async with await LedgerClient.connect(store, config) as client:
            placed = await client.create(Replication(3, 3, 2, 2), b"pw")
            await placed.add(b"x")
            await placed.close()
            # Two of three copies in us-east: an ack quorum of 2 fits inside one region.
            bad = LedgerMetadata(
                3,
                3,
                2,
                (Ensemble(0, (east[0].bookie_id, east[1].bookie_id, west[0].bookie_id)),),
                DigestType.CRC32C,
                b"pw",
                custom_metadata=((MIN_REGIONS_KEY, b"2"),),
            )
            created = await client.context.metadata.create(bad)

    good = globelog(cluster, "audit", str(placed.ledger_id))
    assert good.returncode == 0, good.stderr
    assert "meets_strict" in good.stdout

    both = globelog(cluster, "audit", "--json", str(placed.ledger_id), str(created.ledger_id))
    assert both.returncode == 4, both.stderr
    reports = {r["ledger_id"]: r for r in json.loads(both.stdout)}
    [segment] = reports[created.ledger_id]["audit"]
    assert segment["adherence"] == "fail"
    assert "us-east" in segment["text"]

    shown = globelog(cluster, "show", str(created.ledger_id))
    assert shown.returncode == 0
    [described] = json.loads(shown.stdout)
    assert (
        described["state"] == "OPEN"
        and described["ensembles"][0]["bookies"][0] == east[0].bookie_id
    )

    missing = globelog(cluster, "show", "987654321")
    assert missing.returncode == 1
    assert "ledger 987654321: no metadata at /ledgers/" in missing.stderr
