"""What waits for a write_bulk call: its results, filled as runs of write ids complete."""

from __future__ import annotations

import asyncio
from typing import NamedTuple

from writer.events import Written


class Batch:
    """The results of one write_bulk call, completed when every record is acknowledged."""

    __slots__ = ("future", "remaining", "results")

    def __init__(self, future: asyncio.Future[list[Written]], count: int) -> None:
        self.future = future
        self.results: list[Written | None] = [None] * count
        self.remaining = count

    def done(self, index: int, written: Written) -> None:
        self.results[index] = written
        self.remaining -= 1
        if self.remaining == 0 and not self.future.done():
            self.future.set_result(self.results)  # type: ignore[arg-type]  # no None is left


class Run(NamedTuple):
    """Write ids first_id..end_id-1 of a bulk write: its records from `offset` on."""

    first_id: int
    end_id: int
    batch: Batch
    offset: int
