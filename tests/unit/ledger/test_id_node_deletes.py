"""The id generator's node deletes are not waited for by a new ledger, but closing the
metadata store waits for them at most its bound, then cancels what is left (I8)."""

from __future__ import annotations

import asyncio
from typing import Any

from ledger.drivers.metadata_store import LedgerMetadataStore


class _StuckDeletes:
    """Creates id nodes at once; deletes never answer (a ZooKeeper gone quiet)."""

    def __init__(self) -> None:
        self.deletes_started = 0

    async def exists(self, path: str) -> None:
        return None

    async def create(self, path: str, *args: Any, **kwargs: Any) -> str:
        return f"{path}0000000042"

    async def delete(self, path: str, **kwargs: Any) -> None:
        self.deletes_started += 1
        await asyncio.Event().wait()


async def test_an_id_comes_before_its_node_is_deleted_and_close_is_bounded() -> None:
    store = _StuckDeletes()
    ledgers = LedgerMetadataStore(store)  # type: ignore[arg-type]
    assert await asyncio.wait_for(ledgers.allocate_id(), 1.0) == 42
    await asyncio.sleep(0)
    assert store.deletes_started == 1
    await asyncio.wait_for(ledgers.close(timeout_s=0.05), 1.0)
    assert not ledgers._tidying, "the stuck delete was cancelled, none left behind"
