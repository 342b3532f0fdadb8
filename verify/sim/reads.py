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
from ledger.metadata import LedgerMetadata, write_set_indices
from ledger.read_state import CompleteRead, EntryRead, EntryReadFailed, EntryReadState, FailRead, SendRead
from ledger.signals import BookieFailure, Ticked
from verify.sim.bookie import StoredEntry
from verify.sim.services import BookieLink
from verify.sim.world import World

READS_IN_FLIGHT = 8
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
    bookies = [ensemble[i] for i in write_set_indices(entry_id, len(ensemble), metadata.write_quorum)]
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
    *,
    fence: bool = False,
) -> None:
    """Reads entries first..last; `done(bodies)` or `done(why)` once."""
    node = link.node
    bodies: dict[int, bytes] = {}
    reading: dict[int, tuple[EntryReadState, dict[str, Any]]] = {}
    state = {"next": first, "over": False}

    def finish(result: dict[int, bytes] | str) -> None:
        if not state["over"]:
            state["over"] = True
            done(result)

    def start_more() -> None:
        while not state["over"] and state["next"] <= last and len(reading) < READS_IN_FLIGHT:
            entry_id = state["next"]
            state["next"] += 1
            order = read_order(world, node, metadata, entry_id)
            machine = EntryReadState(entry_id, order, now_s=world.now, timeout_s=READ_TIMEOUT_S, fence=fence)
            reading[entry_id] = (machine, {})
            pump(entry_id)
        if not state["over"] and not reading and state["next"] > last:
            finish(bodies)

    def pump(entry_id: int) -> None:
        machine, answers = reading[entry_id]
        for action in machine.take_actions():
            match action:
                case SendRead():
                    ask(entry_id, action.bookie, action.fence)
                case CompleteRead():
                    bodies[entry_id] = answers[action.bookie]
                    del reading[entry_id]
                case FailRead():
                    finish(f"entry {entry_id} of ledger {ledger_id}: {action.message}")
                    return
        if entry_id not in reading:
            start_more()

    def ask(entry_id: int, bookie: str, fence_it: bool) -> None:
        def answer(result: StoredEntry | BookieFailure) -> None:
            if state["over"] or entry_id not in reading:
                return
            machine, answers = reading[entry_id]
            if isinstance(result, BookieFailure):
                machine.handle(EntryReadFailed(entry_id, bookie, result))
            else:
                answers[bookie] = result.body
                machine.handle(EntryRead(entry_id, bookie, len(result.body), result.length))
            pump(entry_id)

        link.request(bookie, lambda b: b.read(ledger_id, entry_id, fence=fence_it), answer)

    def tick() -> None:
        if state["over"]:
            return
        for entry_id in list(reading):
            if entry_id in reading:
                reading[entry_id][0].handle(Ticked(world.now))
                pump(entry_id)
        world.timer(node, TICK_S, tick)

    if last < first:
        finish(bodies)
        return
    start_more()
    world.timer(node, TICK_S, tick)


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
            entry_id, stored = result
            seen["lac"] = max(seen["lac"], stored.lac)
        if seen["answers"] == len(ensemble):
            finish()

    for bookie in ensemble:
        link.request(bookie, lambda b: b.read_last(ledger_id), answer)
    world.timer(link.node, READ_TIMEOUT_S, finish)
