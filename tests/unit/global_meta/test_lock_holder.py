"""Reading a stream's lock holder while owners come and go (global_meta/streams.py)."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any, cast

import pytest

from core.errors import NoNodeError, OwnershipError
from global_meta import MetaSession
from global_meta.streams import HOLDER_READS_MAX, StreamMetaStore


class QueueOfGoneOwners:
    """A lock queue whose lowest node is gone by the time it is read, `gone` times; then
    one that stays."""

    def __init__(self, gone: int) -> None:
        self.gone = gone
        self.reads = 0

    async def children(self, path: str) -> list[str]:
        return [f"owner-{self.reads:010d}", f"owner-{self.reads + 1:010d}"]

    async def get(self, path: str) -> tuple[bytes, Any]:
        self.reads += 1
        if self.reads <= self.gone:
            raise NoNodeError(path)
        body = json.dumps({"owner": "wp@us-east", "region": "us-east"}).encode()
        return body, SimpleNamespace(ephemeral_owner=7)


async def test_an_owner_gone_while_read_leaves_the_next_in_line_as_the_holder() -> None:
    store = QueueOfGoneOwners(gone=2)
    holder = await StreamMetaStore(cast(MetaSession, store), "ns").holder("s")
    assert holder is not None and holder.path.endswith("owner-0000000002")
    assert store.reads == 3


async def test_a_queue_that_keeps_losing_its_lowest_is_read_a_bounded_number_of_times() -> None:
    """Every await ends (I8): past HOLDER_READS_MAX reads an OwnershipError says so."""
    store = QueueOfGoneOwners(gone=10**6)
    with pytest.raises(OwnershipError, match=f"changed {HOLDER_READS_MAX} times"):
        await StreamMetaStore(cast(MetaSession, store), "ns").holder("s")
    assert store.reads == HOLDER_READS_MAX
