"""Reading entries and segments in the simulation, through the pure read machines.

`fetch_entries` reads entries first..last of a ledger, one `EntryReadState` each (its write
set ordered local region first), a few at a time, and answers once with every body or with
the first entry no replica could serve. `read_stream` reads a stream's segments from a
position: completed ones to their last entry, the open one to the LAC its bookies report.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from core.dlsn import DLSN
from core.entry_format import decode_entry, log_records
from core.records import split_producer
from ledger.codecs.metadata import LedgerMetadata, write_set_indices
from ledger.machines.read_state import (
    CompleteRead,
    EntryRead,
    EntryReadFailed,
    EntryReadState,
    FailRead,
    SendRead,
)
from ledger.machines.signals import BookieFailure, Ticked
from verify.sim.bookie import StoredEntry
from verify.sim.services import BookieLink
from verify.sim.world import World

READS_IN_FLIGHT = 16
SPECULATE_S = (0.1, 0.1)  # ask the next replica when one has not answered by then
READ_TIMEOUT_S = 1.0
TICK_S = 0.05


@dataclass(frozen=True, slots=True)
class SimRecord:
    dlsn: DLSN
    seq: int
    value: int
    producer: tuple[int, int] | None


def decode_records(body: bytes, sequence: int, entry_id: int, first_seq: int) -> list[SimRecord]:
    """The user records of one entry (a value is the payload's 8 bytes)."""
    found = []
    for dlsn, record, seq in log_records(decode_entry(body), sequence, entry_id, first_seq):
        if seq < 0:
            continue  # control and end-of-stream records take no position
        producer = None
        payload = record.payload
        if record.flags & record.flags.PRODUCER:
            pid, pseq, payload = split_producer(payload)
            producer = (pid, pseq)
        found.append(SimRecord(dlsn, seq, int.from_bytes(payload, "big"), producer))
    return found


def read_order(world: World, node: str, metadata: LedgerMetadata, entry_id: int) -> list[str]:
    """The entry's write set, this node's region first."""
    ensemble = metadata.ensemble_for_entry(entry_id)
    bookies = [
        ensemble[i] for i in write_set_indices(entry_id, len(ensemble), metadata.write_quorum)
    ]
    region = world.nodes[node].region
    return sorted(bookies, key=lambda b: world.nodes[b].region != region)


def fetch_entries(
    world: World,
    link: BookieLink,
    metadata: LedgerMetadata,
    ledger_id: int,
    first: int,
    last: int,
    done: Callable[[dict[int, bytes] | str], None],
) -> None:
    """Reads entries first..last; `done(bodies)` or `done(why)` once."""
    _Fetch(world, link, metadata, ledger_id, last, done).start(first)


class _Fetch:
    def __init__(
        self,
        world: World,
        link: BookieLink,
        metadata: LedgerMetadata,
        ledger_id: int,
        last: int,
        done: Callable[[dict[int, bytes] | str], None],
    ) -> None:
        self.world, self.link, self.metadata = world, link, metadata
        self.ledger_id, self.last, self.done = ledger_id, last, done
        self.bodies: dict[int, bytes] = {}
        self.reading: dict[int, tuple[EntryReadState, dict[str, bytes]]] = {}
        self.next = 0
        self.over = False

    def start(self, first: int) -> None:
        self.next = first
        self._start_more()
        if not self.over:
            self.world.timer(self.link.node, TICK_S, self._tick)

    def _finish(self, result: dict[int, bytes] | str) -> None:
        if not self.over:
            self.over = True
            self.done(result)

    def _start_more(self) -> None:
        while not self.over and self.next <= self.last and len(self.reading) < READS_IN_FLIGHT:
            entry_id = self.next
            self.next += 1
            order = read_order(self.world, self.link.node, self.metadata, entry_id)
            machine = EntryReadState(
                entry_id,
                order,
                now_s=self.world.now,
                delays_s=SPECULATE_S,
                timeout_s=READ_TIMEOUT_S,
            )
            self.reading[entry_id] = (machine, {})
            self._pump(entry_id)
        if not self.over and not self.reading and self.next > self.last:
            self._finish(self.bodies)

    def _pump(self, entry_id: int) -> None:
        machine, answers = self.reading[entry_id]
        for action in machine.take_actions():
            match action:
                case SendRead():
                    self._ask(entry_id, action.bookie)
                case CompleteRead():
                    self.bodies[entry_id] = answers[action.bookie]
                    del self.reading[entry_id]
                case FailRead():
                    self._finish(f"entry {entry_id} of ledger {self.ledger_id}: {action.message}")
                    return
        if entry_id not in self.reading:
            self._start_more()

    def _ask(self, entry_id: int, bookie: str) -> None:
        ledger_id = self.ledger_id

        def answer(result: StoredEntry | BookieFailure) -> None:
            if self.over or entry_id not in self.reading:
                return
            machine, answers = self.reading[entry_id]
            if isinstance(result, BookieFailure):
                machine.handle(EntryReadFailed(entry_id, bookie, result))
            else:
                answers[bookie] = result.body
                machine.handle(EntryRead(entry_id, bookie, len(result.body), result.length))
            self._pump(entry_id)

        self.link.request(bookie, lambda b: b.read(ledger_id, entry_id), answer)

    def _tick(self) -> None:
        if self.over:
            return
        for entry_id in list(self.reading):
            if entry_id in self.reading:
                self.reading[entry_id][0].handle(Ticked(self.world.now))
                self._pump(entry_id)
        self.world.timer(self.link.node, TICK_S, self._tick)


def read_lac(
    world: World,
    link: BookieLink,
    metadata: LedgerMetadata,
    ledger_id: int,
    done: Callable[[int], None],
) -> None:
    """The highest LAC any bookie of the ledger's last ensemble reports (a lower bound of the
    entries acknowledged: each entry carries the LAC its writer knew when sending it); -1
    when none answers within the read timeout."""
    ensemble = metadata.ensembles[-1].bookies
    seen = {"lac": -1, "answers": 0, "over": False}

    def finish() -> None:
        if not seen["over"]:
            seen["over"] = True
            done(int(seen["lac"]))

    def answer(result: Any) -> None:
        seen["answers"] += 1
        if not isinstance(result, BookieFailure):
            _, stored = result
            seen["lac"] = max(seen["lac"], stored.lac)
        if seen["answers"] == len(ensemble):
            finish()

    for bookie in ensemble:
        link.request(bookie, lambda b: b.read_last(ledger_id), answer)
    world.timer(link.node, READ_TIMEOUT_S, finish)
