"""A connected LedgerClient for tests, in any region, with any LedgerConfig settings."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from global_meta import MetaStore
from ledger.drivers.client import LedgerClient
from ledger.drivers.context import LedgerConfig
from localcluster.controller import Cluster


@asynccontextmanager
async def ledger_client(
    cluster: Cluster, region: str, **settings: Any
) -> AsyncIterator[LedgerClient]:
    """A client in `region` keeping min_regions_for_durability=2 unless `settings` say otherwise."""
    config = dataclasses.replace(
        LedgerConfig.of(cluster.topology, region), **{"min_regions_for_durability": 2, **settings}
    )
    async with (
        await MetaStore.of(cluster.topology) as store,
        await LedgerClient.connect(store, config) as client,
    ):
        yield client
