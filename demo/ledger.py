"""The ledger part of `make demo`: region-aware placement, reads from every region, fencing."""

from __future__ import annotations

import statistics
import time

from core.topology import Topology
from global_meta import MetaStore
from ledger import LedgerClient, LedgerConfig, LedgerFencedError
from localcluster.controller import Cluster

ENTRIES = 100
ENTRY_BYTES = 1024
READ_SAMPLES = 20


def where(topology: Topology, bookie_id: str) -> str:
    bookie = topology.bookie(bookie_id)
    return f"{bookie.name} ({bookie.location})"


def client_config(cluster: Cluster, region: str) -> LedgerConfig:
    return LedgerConfig.of(cluster.topology, region)


async def ledger_demo(cluster: Cluster, writer_region: str, recovery_region: str) -> None:
    topology = cluster.topology
    async with (
        await MetaStore.of(topology) as store,
        await LedgerClient.connect(store, client_config(cluster, writer_region)) as client,
    ):
        writer = await client.create(topology.replication)
        rep = topology.replication
        print(
            f"  ledger {writer.ledger_id} created from {writer_region}, E/W/A "
            f"{rep.ensemble_size}/{rep.write_quorum}/{rep.ack_quorum}, "
            f"min_regions_for_durability={rep.min_regions_for_durability}; ensemble:"
        )
        for position, bookie in enumerate(writer.metadata.current_ensemble):
            print(f"    [{position}] {where(topology, bookie)}")
        latencies = []
        started = time.perf_counter()
        for i in range(ENTRIES):
            sent = time.perf_counter()
            await writer.add(i.to_bytes(4, "big") * (ENTRY_BYTES // 4))
            latencies.append(time.perf_counter() - sent)
        elapsed = time.perf_counter() - started
        print(
            f"  wrote {ENTRIES} x {ENTRY_BYTES} B one at a time: add latency median "
            f"{statistics.median(latencies) * 1000:.1f} ms, max {max(latencies) * 1000:.1f} ms "
            f"({ENTRIES / elapsed:.0f} adds/s); each add waits for {rep.ack_quorum} acks from "
            f"{rep.min_regions_for_durability}+ regions"
        )
        for region in topology.region_names:
            await read_from(cluster, store, writer.ledger_id, region)
        await recover_from(cluster, store, writer.ledger_id, recovery_region)
        try:
            await writer.add(b"written after the fence")
            print("  UNEXPECTED: the old writer's add succeeded after the fence")
        except LedgerFencedError as err:
            print(f"  the old writer in {writer_region} is fenced: [{err.code}] {err}")
        await writer.abandon()


async def read_from(cluster: Cluster, store: MetaStore, ledger_id: int, region: str) -> None:
    async with await LedgerClient.connect(store, client_config(cluster, region)) as client:
        reader = await client.open(ledger_id)
        lac = await reader.read_lac()
        write_set = reader.metadata.write_set(0)
        order = client.context.placement.read_order(write_set, client.context.clock())
        await reader.read_entry(0)  # connect and warm up
        samples = []
        for entry_id in range(1, min(lac, READ_SAMPLES) + 1):
            started = time.perf_counter()
            await reader.read_entry(entry_id)
            samples.append(time.perf_counter() - started)
        names = " -> ".join(cluster.topology.bookie(b).name for b in order)
        print(
            f"  read from {region:<8} LAC {lac}; read order {names}; "
            f"read latency median {statistics.median(samples) * 1000:.1f} ms"
        )


async def recover_from(cluster: Cluster, store: MetaStore, ledger_id: int, region: str) -> None:
    async with await LedgerClient.connect(store, client_config(cluster, region)) as client:
        started = time.perf_counter()
        reader = await client.open(ledger_id, recover_ledger=True)
        elapsed_ms = (time.perf_counter() - started) * 1000
        print(
            f"  recovery from {region}: fenced, agreed on last entry {reader.lac}, ledger "
            f"{reader.metadata.state.name} in {elapsed_ms:.0f} ms"
        )
        last = await reader.read_entry(reader.lac)
        assert last[:4] == reader.lac.to_bytes(4, "big"), "the last entry is the last written"
