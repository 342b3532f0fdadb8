"""A reading process's connections: ZooKeeper (the region's own node) and the bookies, with
reads from the local region first. For processes that only read (the Spark data source's
workers), which reach the ledger client through the reader alone."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from core.topology import Topology
from global_meta import MetaStore
from global_meta.streams import StreamMetaStore
from ledger import LedgerClient, LedgerConfig


@dataclass(frozen=True, slots=True)
class ReadSession:
    streams: StreamMetaStore
    ledgers: LedgerClient


@asynccontextmanager
async def read_session(
    topology: Topology, region: str, namespace: str, session_timeout_s: float = 10.0
) -> AsyncIterator[ReadSession]:
    """Connections of a reader in `region` (one of the topology's) to `namespace`."""
    config = LedgerConfig.of(topology, region)
    async with (
        await MetaStore.of(topology, region, session_timeout_s=session_timeout_s) as store,
        await LedgerClient.connect(store, config) as ledgers,
    ):
        yield ReadSession(StreamMetaStore(store, namespace), ledgers)
