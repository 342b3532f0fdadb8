"""A cluster's own metadata in ZooKeeper: the published topology and the registered bookies
(used by the local launcher and by `globelog init|status` on real hosts)."""

from __future__ import annotations

from core.routes import TOPOLOGY_ZNODE, encode_published, publish_topology
from core.topology import Topology
from global_meta import MetaStore
from ledger import LEDGERS_ROOT


async def publish(store: MetaStore, topology: Topology) -> int:
    """Writes bookie locations and per-region dial addresses for every client to read;
    returns the znode's version."""
    data = encode_published(publish_topology(topology))
    stat = await store.exists(TOPOLOGY_ZNODE)
    if stat is None:
        await store.create(TOPOLOGY_ZNODE, data, make_parents=True)
        return 0
    return (await store.set(TOPOLOGY_ZNODE, data, version=stat.version)).version


async def registered_bookies(store: MetaStore) -> tuple[set[str], set[str]]:
    """(writable, read-only) bookie ids registered under /ledgers/available."""
    available = f"{LEDGERS_ROOT}/available"
    names = set(await store.children(available))
    read_only = set(await store.children(f"{available}/readonly")) if "readonly" in names else set()
    return names - {"readonly"}, read_only
