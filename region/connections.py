"""A library-mode program's connections in one region: ZooKeeper, the bookies, the streams of
one namespace (the CLI's --direct commands and the stream benchmarks open one each)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from core.errors import InvalidRecordError
from core.topology import Topology
from global_meta import MetaStore
from global_meta.streams import StreamMetaStore
from ledger import LedgerClient, LedgerConfig


@dataclass
class Session:
    """One command's connections."""

    topology: Topology
    region: str
    store: MetaStore
    ledgers: LedgerClient
    streams: StreamMetaStore


@asynccontextmanager
async def session(
    topology: Topology, region: str, namespace: str, session_timeout_s: float = 10.0
) -> AsyncIterator[Session]:
    if region not in topology.region_names:
        raise InvalidRecordError(
            f"--region {region!r}: expected one of {list(topology.region_names)}"
        )
    config = LedgerConfig.of(topology, region)
    async with (
        await MetaStore.of(topology, session_timeout_s=session_timeout_s) as store,
        await LedgerClient.connect(store, config) as ledgers,
    ):
        yield Session(topology, region, store, ledgers, StreamMetaStore(store, namespace))
