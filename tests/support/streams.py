"""Stream fixtures for tests: a namespace of its own per test, library-mode writers and readers."""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from core.records import LogRecord
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
# A reader sees the last acknowledged entry once a later entry or control record carries the
# LAC past it, which the writer sends within its flush SLA (a fraction of a second here).
READ_COMPLETE_TIMEOUT_S = 10.0
READ_AGAIN_S = 0.05


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

    async def read_complete(self, stream: str, count: int) -> list[LogRecord]:
        """The stream read to its end, again until a read finds `count` records or
        READ_COMPLETE_TIMEOUT_S passes; then what the last read found, for the caller's
        assertion to show (a read at once may end one entry short of the acknowledged end)."""
        deadline = time.monotonic() + READ_COMPLETE_TIMEOUT_S
        while True:
            reader = await self.reader(stream, follow=False)
            async with reader:
                records = [r async for r in reader]
            if len(records) >= count or time.monotonic() > deadline:
                return records
            await asyncio.sleep(READ_AGAIN_S)


def fresh_namespace() -> str:
    return f"t{uuid.uuid4().hex[:10]}"


@asynccontextmanager
async def stream_env(
    cluster: Cluster, region: str, namespace: str, **ledger_settings: Any
) -> AsyncIterator[StreamEnv]:
    config = dataclasses.replace(
        LedgerConfig.of(cluster.topology, region), min_regions_for_durability=2, **ledger_settings
    )
    async with (
        await MetaStore.of(cluster.topology) as store,
        await LedgerClient.connect(store, config) as ledgers,
    ):
        yield StreamEnv(region, store, ledgers, StreamMetaStore(store, namespace))
