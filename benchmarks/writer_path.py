"""Micro-benchmark of a log writer's own cost per record: CPU µs per record, median and spread.

Run from the repository root:  .venv/bin/python -m benchmarks.writer_path [--records N]

A LogWriter (writer/log_writer.py, its state machine and its driver, unchanged) writes to a
ledger that acknowledges each entry on the loop's next turn, with no bookie and no IO, so what
is timed is the writer's path alone: `write_nowait` per record with a done callback per record
(what `globelog bench stream` and `bench dl` do), entries encoded, acknowledgements turned into
each record's DLSN and sequence id. Two shapes: 100 B records batched into 64 KiB entries (2 ms
flush SLA, 20 000 outstanding), and 100 B records each on its own entry (512 outstanding).
Each is run `--runs` times on uvloop in this one process, the process's CPU time per record
taken each run; the ledger's side (a future per entry) is in the figure too.
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import statistics
import time

import uvloop

from core.records import Record
from core.segments import SegmentMetadata, SegmentState
from core.streams import StreamSettings, TransmitPolicy
from core.topology import Replication
from global_meta.streams import OwnerLock, VersionedSegment
from writer.events import Written
from writer.log_writer import LogWriter, WriterConfig
from writer.state import SegmentStart

SHAPES = {
    "batched": StreamSettings(
        transmit=TransmitPolicy.SIZE,
        buffer_bytes=64 * 1024,
        flush_sla_s=0.002,
        pending_writes_max=20_000,
    ),
    "an entry each": StreamSettings(transmit=TransmitPolicy.IMMEDIATE, pending_writes_max=512),
}


class _AckingLedger:
    """A ledger that acknowledges every entry on the loop's next turn."""

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.entries = 0

    def has_room(self) -> bool:
        return True

    def append(self, payload: bytes) -> asyncio.Future[int]:
        future: asyncio.Future[int] = self._loop.create_future()
        self._loop.call_soon(future.set_result, self.entries)
        self.entries += 1
        return future

    async def close(self) -> None:
        return None

    async def abandon(self) -> None:
        return None


class _Writer(LogWriter):
    """The writer without its lock and session watches (no ZooKeeper here)."""

    async def _watch_session(self) -> None:
        await asyncio.Event().wait()

    async def _watch_lock(self) -> None:
        await asyncio.Event().wait()


async def _one_run(settings: StreamSettings, records: int) -> tuple[float, int]:
    """CPU µs per record, and entries made."""
    config = WriterConfig("us-east", Replication(4, 4, 3, 2), settings)
    start = SegmentStart(1, 0, -1)
    segment = SegmentMetadata(1, 1, SegmentState.IN_PROGRESS, start.max_txid, 0, 0, "us-east")
    ledger = _AckingLedger()
    writer = _Writer(
        None,  # type: ignore[arg-type]  # the store and the ledger client are never used
        None,  # type: ignore[arg-type]
        "bench",
        config,
        OwnerLock("/bench", "bench"),
        VersionedSegment(segment, 0),
        ledger,  # type: ignore[arg-type]
        start.max_txid,
    )
    record = Record(b"x" * 100)
    acked = [0]

    def done(_: asyncio.Future[Written]) -> None:
        acked[0] += 1

    window = settings.pending_writes_max
    last = None
    sent = 0
    began = time.process_time()
    while sent < records:
        await writer.wait_for_room()
        for _ in range(min(100, window - writer.pending_writes, records - sent)):
            last = writer.write_nowait(record)
            last.add_done_callback(done)
            sent += 1
    writer.flush()
    if last is not None:
        await last
    cpu_s = time.process_time() - began
    for task in list(writer._tasks):  # the two watches above
        task.cancel()
    return cpu_s / records * 1e6, ledger.entries


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000, help="per run")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    print(
        f"writer path: {args.records} records of 100 B a run, {args.runs} runs a shape, uvloop, "
        f"one process; Python {platform.python_version()} on {platform.machine()}"
    )
    print(f"  {'shape':<14} {'CPU µs/record, median':>22} {'min':>6} {'max':>6} {'entries':>8}")
    for name, settings in SHAPES.items():
        count = args.records if name == "batched" else max(1, args.records // 4)
        runs = [uvloop.run(_one_run(settings, count)) for _ in range(args.runs)]
        cpu = [us for us, _ in runs]
        print(
            f"  {name:<14} {statistics.median(cpu):>22.2f} {min(cpu):>6.2f} {max(cpu):>6.2f} "
            f"{runs[-1][1]:>8}"
        )


if __name__ == "__main__":
    main()
