"""An in-test model of bookies, the network between them and a client, and ledger metadata.

Small on purpose: a bookie stores entries, can be fenced, crashed (requests vanish or are
refused), read-only, or hold a corrupt copy. The network delivers requests and replies in a
random order. `Client` drives one pure machine (AddState or RecoveryState): it carries out
its actions through the network and feeds the answers back, checking each step.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from ledger.codecs.entry import DigestType
from ledger.codecs.metadata import Ensemble, LedgerMetadata, LedgerState, write_set_indices
from ledger.machines.add_events import (
    AddAcked,
    AddErrorKind,
    AddFailed,
    ChangeEnsemble,
    CloseLedger,
    CompleteAdds,
    EnsembleChanged,
    EnsembleChangeFailed,
    FailAdds,
    FailClose,
    ForgetPayloads,
    SendAdd,
)
from ledger.machines.read_lac_state import LacReadFailed, LacReplied, SendReadLac
from ledger.machines.read_state import CompleteRead, EntryRead, EntryReadFailed, SendRead
from ledger.machines.recovery_events import FailRecovery
from ledger.machines.signals import BookieFailure, RecordHealth
from verify.sim.bookie import SimBookie, StoredEntry


@dataclass(frozen=True, slots=True)
class Stored:
    lac: int
    length: int
    payload_len: int


LEDGER_ID = 1  # the one ledger of the model


class Bookie:
    """A bookie of the model: storage and answers are a `SimBookie`'s (the simulated bookie
    the contract tests hold to a real one), with the model's faults on top: crashed (requests
    vanish, or are refused), slow, and corrupt copies (a digest mismatch on read). Read-only
    is the SimBookie's own flag (it refuses every add, recovery adds included).

    A corrupt copy stays corrupt when the entry is added again: the SimBookie keeps the
    first copy, as a real bookie does (it reads its entry log before its memtable)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.store = SimBookie(name)
        self.crashed = False
        self.refuses = False  # when crashed: refuse connections (else requests vanish)
        self.slow = False  # its requests and replies are delivered 10x less often
        self.corrupt: set[int] = set()

    @property
    def entries(self) -> dict[int, Stored]:
        return {entry_id: held.body for entry_id, held in self.store.held(LEDGER_ID).items()}

    @property
    def fenced(self) -> bool:
        return self.store.is_fenced(LEDGER_ID)

    @fenced.setter
    def fenced(self, value: bool) -> None:
        assert value, "a fence is never lifted"
        self.store.read_last(LEDGER_ID, fence=True)  # as recovery's fencing read does

    @property
    def read_only(self) -> bool:
        return self.store.read_only

    @read_only.setter
    def read_only(self, value: bool) -> None:
        self.store.read_only = value

    def add(self, entry_id: int, stored: Stored, recovery: bool) -> BookieFailure | None:
        entry = StoredEntry(stored.lac, stored.length, stored)
        return self.store.add(LEDGER_ID, entry_id, entry, recovery=recovery)

    def read(self, entry_id: int, fence: bool) -> Stored | BookieFailure:
        found = self.store.read(LEDGER_ID, entry_id, fence=fence)
        if isinstance(found, BookieFailure):
            return found
        return BookieFailure.DIGEST_MISMATCH if entry_id in self.corrupt else found.body

    def read_lac(self, fence: bool) -> Stored | BookieFailure:
        found = self.store.read_last(LEDGER_ID, fence=fence)
        if isinstance(found, BookieFailure):
            return found
        entry_id, held = found
        return BookieFailure.DIGEST_MISMATCH if entry_id in self.corrupt else held.body


@dataclass
class Metadata:
    """The ledger's metadata znode: ensemble history, state, and the end once closed."""

    write_quorum: int
    ack_quorum: int
    ensembles: list[tuple[int, tuple[str, ...]]]
    state: str = "OPEN"
    last_entry_id: int | None = None
    length: int | None = None

    def write_set(self, entry_id: int) -> list[str]:
        bookies = [b for first, b in self.ensembles if first <= entry_id][-1]
        return [bookies[i] for i in write_set_indices(entry_id, len(bookies), self.write_quorum)]

    def copy(self) -> Metadata:
        return Metadata(
            self.write_quorum,
            self.ack_quorum,
            list(self.ensembles),
            self.state,
            self.last_entry_id,
            self.length,
        )

    def ledger_metadata(self) -> LedgerMetadata:
        """As ledger.codecs.metadata has it (what RecoveryState takes)."""
        return LedgerMetadata(
            ensemble_size=len(self.ensembles[0][1]),
            write_quorum=self.write_quorum,
            ack_quorum=self.ack_quorum,
            ensembles=tuple(Ensemble(first, bookies) for first, bookies in self.ensembles),
            digest_type=DigestType.CRC32C,
            password=b"",
            state=LedgerState[self.state],
        )

    def change(self, first: int, ensemble: tuple[str, ...]) -> None:
        assert first >= self.ensembles[-1][0], (first, self.ensembles)
        if self.ensembles[-1][0] == first:
            self.ensembles[-1] = (first, ensemble)
        else:
            self.ensembles.append((first, ensemble))


SLOW_WEIGHT = 0.1  # a slow bookie's message is picked this much less often than others


class Network:
    """Messages in flight, delivered one at a time in a random order (slow ones less often)."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self._queue: list[tuple[Callable[[], None], Bookie | None, str]] = []

    def post(self, deliver: Callable[[], None], via: Bookie | None = None, label: str = "") -> None:
        self._queue.append((deliver, via, label))

    def deliver_one(self) -> bool:
        if not self._queue:
            return False
        weights = [SLOW_WEIGHT if m[1] is not None and m[1].slow else 1.0 for m in self._queue]
        index = self.rng.choices(range(len(self._queue)), weights)[0]
        self._queue[index], self._queue[-1] = self._queue[-1], self._queue[index]
        self._queue.pop()[0]()
        return True

    def deliver(self, label: str) -> None:
        """Deliver the oldest message labelled `label` (scripted interleavings)."""
        for index, message in enumerate(self._queue):
            if message[2] == label:
                del self._queue[index]
                message[0]()
                return
        raise AssertionError(f"no message {label!r} in flight: {[m[2] for m in self._queue]}")

    def __len__(self) -> int:
        return len(self._queue)


class Cluster:
    def __init__(self, rng: random.Random, names: list[str], metadata: Metadata) -> None:
        self.rng = rng
        self.bookies = {name: Bookie(name) for name in names}
        self.metadata = metadata
        self.network = Network(rng)

    def stored_copies(self, view: Metadata, entry_id: int, payload_len: int) -> int:
        """Bookies of the entry's write set (per `view`) holding a good copy of it."""
        return sum(
            1
            for name in view.write_set(entry_id)
            if (s := self.bookies[name].entries.get(entry_id)) is not None
            and s.payload_len == payload_len
        )

    def heal(self) -> None:
        for bookie in self.bookies.values():
            bookie.crashed = bookie.read_only = bookie.slow = False


class Client:
    """Carries out one machine's actions over the cluster and checks what it completes."""

    def __init__(self, name: str, machine: Any, cluster: Cluster, view: Metadata) -> None:
        self.name = name
        self.machine = machine
        self.cluster = cluster
        # The metadata as this client sees it: the writer's is the cluster's; recovery keeps
        # its ensemble changes in a copy until its close writes them.
        self.view = view
        self.ensemble = view.ensembles[-1][1]  # for choosing replacements
        self.payloads: dict[int, int] = {}  # the writer's entries: id -> payload length
        # The entries whose payload the writer's driver still holds: from submit until
        # completion, or until the last copy owed after an ensemble change is sent.
        self.held: set[int] = set()
        self.completed_in_changes = 0  # entries completed while an ensemble change was on
        self.kept: dict[int, Stored] = {}  # bodies recovery read and will re-add
        self.lac: int | None = -1 if name == "writer" else None
        self.failed: set[int] = set()
        self.saw_fenced = False
        self.closed: CloseLedger | None = None
        self.recovery_error: str | None = None
        self._reading: Stored | None = None  # the body under the EntryRead being fed
        self.pump()

    def submitted(self, entry_id: int, payload_len: int) -> None:
        """The writer's driver took entry `entry_id`'s payload (after `machine.submit`)."""
        self.payloads[entry_id] = payload_len
        self.held.add(entry_id)

    def feed(self, event: object) -> None:
        fences = (
            isinstance(event, AddFailed)
            and event.kind is BookieFailure.FENCED
            and event.entry_id > (-1 if self.lac is None else self.lac)
            and event.entry_id not in self.failed
            and event.bookie in self._write_set(event.entry_id)  # else a stale answer
        )
        self.machine.handle(event)
        self.pump()
        if fences:  # a fenced pending add ends the handle at once (I5)
            assert self.machine.is_terminal and self.saw_fenced, f"{event} did not end the handle"

    def _write_set(self, entry_id: int) -> list[str]:
        """The entry's write set in this client's current ensemble."""
        size, write_quorum = len(self.ensemble), self.view.write_quorum
        return [self.ensemble[i] for i in write_set_indices(entry_id, size, write_quorum)]

    def check_durable(self) -> None:
        """Every completed entry is still on enough bookies of its write set per the view."""
        writer = self.name == "writer"
        needed = self.view.ack_quorum if writer else self.view.write_quorum
        first = 0 if writer else min(self.kept, default=0)
        for entry_id in range(first, (-1 if self.lac is None else self.lac) + 1):
            payload_len = self.payloads[entry_id] if writer else self.kept[entry_id].payload_len
            copies = self.cluster.stored_copies(self.view, entry_id, payload_len)
            assert copies >= needed, f"completed entry {entry_id} has {copies} copies now"

    def pump(self) -> None:
        for action in self.machine.take_actions():
            self._carry_out(action)
        self.machine.validate()

    def _carry_out(self, action: object) -> None:
        match action:
            case SendAdd():
                self._send_add(action)
            case SendReadLac():
                answer_lac = partial(self._lac_reply, fence=action.fence)
                self._request(action.bookie, answer_lac, "read-lac")
            case SendRead():
                answer_read = partial(self._read_reply, action=action)
                self._request(action.bookie, answer_read, f"read e={action.entry_id}")
            case CompleteRead():
                assert self._reading is not None
                self.kept[action.entry_id] = self._reading
            case ChangeEnsemble():
                change = partial(self._change_ensemble, action)
                self.cluster.network.post(change, label=f"{self.name}:change-ensemble")
            case CompleteAdds():
                self._completed(action)
            case ForgetPayloads():
                assert set(action.entry_ids) <= self.held, (action, self.held)
                assert max(action.entry_ids) <= (-1 if self.lac is None else self.lac), action
                self.held -= set(action.entry_ids)
            case FailAdds():
                assert not self.failed & set(action.entry_ids), action
                floor = -1 if self.lac is None else self.lac
                assert all(e > floor for e in action.entry_ids), (action, self.lac)
                self.failed |= set(action.entry_ids)
                self.saw_fenced = self.saw_fenced or action.error.kind is AddErrorKind.FENCED
            case FailClose():
                self.held.clear()  # the driver drops every payload at the handle's end
                # Emitted with every failure of the handle; the failure itself was checked
                # with its FailAdds (or the handle had nothing pending).
                self.saw_fenced = self.saw_fenced or action.error.kind is AddErrorKind.FENCED
            case CloseLedger():
                self._close(action)
            case FailRecovery():
                self.recovery_error = action.message
            case RecordHealth():
                pass
            case _:
                raise AssertionError(f"unexpected action {action}")

    def _request(self, bookie_name: str, answer: Callable[[Bookie], object], what: str) -> None:
        """Send a request; its answer (an event) comes back later, unless the bookie is gone.

        Messages are labelled "writer:add e=3 -> b1" and "writer:add e=3 <- b1".
        """
        network = self.cluster.network
        bookie = self.cluster.bookies[bookie_name]

        def arrive() -> None:
            if bookie.crashed and not bookie.refuses:
                return  # vanished: the machine's timeout notices
            event = answer(bookie)
            reply = f"{self.name}:{what} <- {bookie_name}"
            network.post(lambda: self._deliver(event), via=bookie, label=reply)

        network.post(arrive, via=bookie, label=f"{self.name}:{what} -> {bookie_name}")

    def _deliver(self, event: object) -> None:
        if isinstance(event, tuple):  # (EntryRead, body)
            self._reading = event[1]
            self.feed(event[0])
            self._reading = None
        else:
            self.feed(event)

    def _send_add(self, action: SendAdd) -> None:
        assert action.lac < action.entry_id, action
        if action.recovery:
            body = self.kept[action.entry_id]
            assert action.length == body.length, (action, body)
            stored = Stored(action.lac, action.length, body.payload_len)
        else:
            stored = Stored(action.lac, action.length, self.payloads[action.entry_id])
            assert action.length == sum(self.payloads[e] for e in range(action.entry_id + 1))
            if action.entry_id not in self.held:  # the driver skips a dropped payload's send
                assert not action.last_use, f"{action}: the payload was dropped already"
                return
            if action.last_use:
                assert self.lac is not None and action.entry_id <= self.lac, action
                self.held.discard(action.entry_id)

        def answer(bookie: Bookie) -> object:
            if bookie.crashed:
                return AddFailed(action.entry_id, bookie.name, BookieFailure.BOOKIE_DOWN)
            failure = bookie.add(action.entry_id, stored, action.recovery)
            if failure is None:
                return AddAcked(action.entry_id, bookie.name)
            return AddFailed(action.entry_id, bookie.name, failure)

        self._request(action.bookie, answer, f"add e={action.entry_id}")

    def _lac_reply(self, bookie: Bookie, fence: bool) -> object:
        if bookie.crashed:
            return LacReadFailed(bookie.name, BookieFailure.BOOKIE_DOWN)
        reply = bookie.read_lac(fence)
        if isinstance(reply, BookieFailure):
            return LacReadFailed(bookie.name, reply)
        return LacReplied(bookie.name, reply.lac, reply.length)

    def _read_reply(self, bookie: Bookie, action: SendRead) -> object:
        if bookie.crashed:
            return EntryReadFailed(action.entry_id, bookie.name, BookieFailure.BOOKIE_DOWN)
        reply = bookie.read(action.entry_id, action.fence)
        if isinstance(reply, BookieFailure):
            return EntryReadFailed(action.entry_id, bookie.name, reply)
        event = EntryRead(action.entry_id, bookie.name, reply.payload_len, reply.length)
        return (event, reply)

    def _change_ensemble(self, action: ChangeEnsemble) -> None:
        metadata = self.cluster.metadata
        assert action.persist == (self.name == "writer"), action
        if action.persist and metadata.state != "OPEN":  # the CAS finds the ledger taken
            kind = AddErrorKind.FENCED if metadata.state == "IN_RECOVERY" else AddErrorKind.CLOSED
            self.feed(EnsembleChangeFailed(kind, f"the ledger metadata is {metadata.state}"))
            return
        spares = sorted(set(self.cluster.bookies) - set(self.ensemble))
        if len(spares) < len(action.indices):
            self.feed(EnsembleChangeFailed(AddErrorKind.ENSEMBLE_CHANGE_FAILED, "no bookies"))
            return
        ensemble = list(self.ensemble)
        chosen = self.cluster.rng.sample(spares, len(action.indices))
        for index, spare in zip(action.indices, chosen, strict=True):
            ensemble[index] = spare
        self.ensemble = tuple(ensemble)
        self.view.change(action.first_entry_id, self.ensemble)
        self.feed(EnsembleChanged(action.first_entry_id, self.ensemble))

    def _close(self, action: CloseLedger) -> None:
        metadata = self.cluster.metadata
        expected = "OPEN" if self.name == "writer" else "IN_RECOVERY"
        if metadata.state != expected:
            return  # the CAS fails: someone else closed or is recovering the ledger
        for ensemble in action.ensembles:
            metadata.change(ensemble.first_entry_id, ensemble.bookies)
        metadata.state = "CLOSED"
        metadata.last_entry_id, metadata.length = action.last_entry_id, action.length
        self.closed = action

    def _completed(self, action: CompleteAdds) -> None:
        if self.lac is not None:
            assert action.first_entry_id == self.lac + 1, (action, self.lac)
        assert action.last_entry_id >= action.first_entry_id, action
        assert not self.saw_fenced, f"{action} after the writer was told it is fenced"
        writer = self.name == "writer"
        needed = self.view.ack_quorum if writer else self.view.write_quorum
        for entry_id in range(action.first_entry_id, action.last_entry_id + 1):
            assert entry_id not in self.failed, entry_id
            payload_len = self.payloads[entry_id] if writer else self.kept[entry_id].payload_len
            copies = self.cluster.stored_copies(self.view, entry_id, payload_len)
            assert copies >= needed, f"entry {entry_id} completed with {copies} copies"
        self.lac = action.last_entry_id
        entries = set(range(action.first_entry_id, action.last_entry_id + 1))
        if action.keep_payloads:
            self.completed_in_changes += len(entries)
        else:
            self.held -= entries
