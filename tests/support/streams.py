"""Stream fixtures for tests: a namespace of its own per test, library-mode writers and readers."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from core.streams import StreamSettings
from core.topology import Replication
from global_meta import MetaStore
from global_meta.streams import StreamMetaStore
from ledger import LedgerClient, LedgerConfig
from localcluster.controller import Cluster
from reader.log_reader import LogReader, ReaderConfig
from reader.positions import Position
from writer.log_writer import LogWriter, WriterConfig

REPLICATION = Replication(3, 3, 2, 2)


@dataclass
class StreamEnv:
    """One region's connections: metadata, ledgers, and the test's namespace."""

    region: str
    store: MetaStore
    ledgers: LedgerClient
    streams: StreamMetaStore

    async def writer(self, stream: str, **settings: Any) -> LogWriter:
        owner = settings.pop("owner", f"test-{self.region}-{uuid.uuid4().hex[:6]}")
        config = WriterConfig(
            region=self.region,
            replication=REPLICATION,
            settings=dataclasses.replace(StreamSettings(), **settings),
            owner=owner,
        )
        return await LogWriter.open(self.streams, self.ledgers, stream, config)

    async def reader(self, stream: str, start: Position | None = None, **config: Any) -> LogReader:
        return await LogReader.open(
            self.streams, self.ledgers, stream, start, ReaderConfig(**config)
        )


def fresh_namespace() -> str:
    return f"t{uuid.uuid4().hex[:10]}"


@asynccontextmanager
async def stream_env(
    cluster: Cluster, region: str, namespace: str, **ledger_settings: Any
) -> AsyncIterator[StreamEnv]:
    config = dataclasses.replace(
        LedgerConfig(region=region, min_regions_for_durability=2), **ledger_settings
    )
    async with (
        await MetaStore.connect(cluster.topology.zk_connect) as store,
        await LedgerClient.connect(store, config) as ledgers,
    ):
        yield StreamEnv(region, store, ledgers, StreamMetaStore(store, namespace))
