"""A cluster's own metadata in ZooKeeper: the published topology and the registered bookies
(used by the local launcher and by `globelog init|status` on real hosts)."""

from __future__ import annotations

import dataclasses

from core.errors import BadVersionError, MetadataError, NodeExistsError, NoNodeError
from core.routes import (
    TOPOLOGY_ZNODE,
    PublishedTopology,
    decode_published,
    encode_published,
    publish_topology,
)
from core.topology import Topology
from global_meta import MetaStore
from ledger import LEDGERS_ROOT

PUBLISH_ATTEMPTS = 8  # compare-and-set rounds against a concurrent republication


async def publish(store: MetaStore, topology: Topology) -> int:
    """Writes bookie locations and per-region dial addresses for every client to read;
    returns the znode's version. A region drained by a removal under way stays drained, and
    a replication a region change published is replaced by the file's (its newest intent)."""
    for _ in range(PUBLISH_ATTEMPTS):
        current = await read_published(store)
        drained = current[0].drained if current is not None else ()
        published = publish_topology(topology, drained)
        if current is None or current[0].replication is None:
            # writers take the replication they were configured with (docs/operations.md)
            published = dataclasses.replace(published, replication=None)
        try:
            return await write_published(store, published, None if current is None else current[1])
        except (BadVersionError, NodeExistsError):
            continue  # a region change republished meanwhile: read it again
    raise MetadataError(f"{TOPOLOGY_ZNODE} changed under {PUBLISH_ATTEMPTS} attempts to publish")


async def read_published(store: MetaStore) -> tuple[PublishedTopology, int] | None:
    """The published topology and its znode version (None before the first publication),
    read after a sync: an operator's command acts on the newest."""
    try:
        await store.sync(TOPOLOGY_ZNODE)
        data, stat = await store.get(TOPOLOGY_ZNODE)
    except NoNodeError:
        return None
    return decode_published(data, TOPOLOGY_ZNODE), stat.version


async def write_published(
    store: MetaStore, published: PublishedTopology, version: int | None = None
) -> int:
    """Publishes `published`; with `version`, only over that version of the znode
    (BadVersionError otherwise). Returns the new version."""
    data = encode_published(published)
    stat = await store.exists(TOPOLOGY_ZNODE)
    if stat is None:
        await store.create(TOPOLOGY_ZNODE, data, make_parents=True)
        return 0
    expected = stat.version if version is None else version
    return (await store.set(TOPOLOGY_ZNODE, data, version=expected)).version


async def registered_bookies(store: MetaStore) -> tuple[set[str], set[str]]:
    """(writable, read-only) bookie ids registered under /ledgers/available."""
    available = f"{LEDGERS_ROOT}/available"
    names = set(await store.children(available))
    read_only = set(await store.children(f"{available}/readonly")) if "readonly" in names else set()
    return names - {"readonly"}, read_only
