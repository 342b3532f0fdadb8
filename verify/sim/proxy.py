"""A simulated write proxy: the ownership lock, the takeover (fence and recover the last
segment, complete it, rebuild the producer table), and the stream's writes through the pure
machines the real proxy drives (LogWriterState, AddState, RecoveryState, ProducerTable).

Every step is a request over the World's network with a deadline: a takeover that does not
finish in TAKEOVER_S gives the stream up (its waiting writes answered `unavailable`), so no
write waits forever. Answers to clients: `ok` (with the DLSN), `redirect` (another proxy
owns the stream), `unavailable` (certainly not written), `indeterminate` (accepted, then the
writer failed: it may have landed), `busy` (the same producer seq is still in flight).
The machine classes come from `Machines`, so tests can run deliberately broken variants.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from core import errors
from core.dlsn import DLSN
from core.entry_format import decode_entry, encode_entry, user_record_count
from core.records import Record
from core.streams import StreamSettings, TransmitPolicy
from global_meta.store import Op
from ledger import DigestType
from ledger.codecs.metadata import Ensemble, LedgerMetadata, LedgerState
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
    SendAdd,
)
from ledger.machines.add_state import AddState
from ledger.machines.read_lac_state import LacReadFailed, LacReplied, SendReadLac
from ledger.machines.read_state import CompleteRead, EntryRead, EntryReadFailed, SendRead
from ledger.machines.recovery_events import FailRecovery
from ledger.machines.recovery_state import RecoveryState
from ledger.machines.signals import BookieFailure, Ticked
from region.producers import ProducerTable
from verify.sim.bookie import SimBookie, StoredEntry
from verify.sim.reads import decode_records, fetch_entries
from verify.sim.services import (
    BookieLink,
    SimSegment,
    ZkClient,
    ledger_path,
    lock_dir,
    segments_path,
)
from writer import events as w
from writer.state import LogWriterState, SegmentStart

TICK_S = 0.02
TAKEOVER_S = 3.0
WRITE_QUORUM, ACK_QUORUM = 3, 2  # one bookie per region: every ack quorum spans 2 regions


@dataclass(frozen=True, slots=True)
class Machines:
    """The pure machines a simulated proxy runs (tests subclass them to break them)."""

    add_state: type[AddState] = AddState
    recovery_state: type[RecoveryState] = RecoveryState
    forgets_producers: bool = False  # a broken proxy: no producer table after a takeover


@dataclass(slots=True)
class WriteRequest:
    stream: str
    value: int
    producer: tuple[int, int] | None
    reply: Callable[[str, DLSN | None, str], None]  # (kind, dlsn, detail)


class Phase(enum.Enum):
    TAKING_OVER = "taking over"
    WRITING = "writing"
    ROLLING = "rolling"
    CLOSING = "closing"
    DONE = "done"


SETTINGS = StreamSettings(
    transmit=TransmitPolicy.IMMEDIATE,
    buffer_bytes=0,
    segment_roll_bytes=600,
    flush_sla_s=0.05,
    flush_interval_s=0.01,
    pending_writes_max=200,
)


class SimProxy:
    def __init__(
        self,
        name: str,
        world: Any,
        zk: Any,
        bookies: dict[str, SimBookie],
        session_timeout_s: float,
        machines: Machines,
    ) -> None:
        self.name, self.world, self.machines = name, world, machines
        self.region = world.nodes[name].region
        self.bookies = bookies
        self.link = BookieLink(world, bookies, name)
        self.zk = ZkClient(world, zk, name, session_timeout_s, self._session_lost)
        self.owners: dict[str, StreamOwner] = {}

    def start(self) -> None:
        """(Re)starts the process: a fresh session, no streams."""
        self.owners = {}
        self.zk = ZkClient(self.world, self.zk.zk, self.name, self.zk.timeout_s, self._session_lost)
        self.zk.start()

    def handle_write(self, request: WriteRequest) -> None:
        if not self.zk.connected:
            request.reply("unavailable", None, "no ZooKeeper session")
            return
        owner = self.owners.get(request.stream)
        if owner is None:
            owner = self.owners[request.stream] = StreamOwner(self, request.stream)
            owner.take_over()
        owner.write(request)

    def handle_seal(self, stream: str, reply: Callable[[str, DLSN | None, str], None]) -> None:
        """Closes the stream's current segment (the end of a run): ok once it is completed."""
        if not self.zk.connected:
            reply("unavailable", None, "no ZooKeeper session")
            return
        owner = self.owners.get(stream)
        if owner is None:
            owner = self.owners[stream] = StreamOwner(self, stream)
            owner.take_over()
        owner.seal(reply)

    def forget(self, owner: StreamOwner) -> None:
        if self.owners.get(owner.stream) is owner:
            del self.owners[owner.stream]

    def _session_lost(self) -> None:
        for owner in list(self.owners.values()):
            owner.fail(w.FailureKind.OWNERSHIP, "the ZooKeeper session ended")


@dataclass(slots=True)
class _Open:
    """The segment being written."""

    segment: SimSegment
    metadata: LedgerMetadata
    version: int  # of the ledger's metadata znode
    adds: AddState
    pending: dict[int, tuple[int, bytes]] = field(default_factory=dict)  # entry -> (transmit, body)


class StreamOwner:
    def __init__(self, proxy: SimProxy, stream: str) -> None:
        self.proxy, self.stream = proxy, stream
        self.world = proxy.world
        self.phase = Phase.TAKING_OVER
        self.lock: str | None = None
        self.waiting: list[WriteRequest] = []
        self.seals: list[Callable[[str, DLSN | None, str], None]] = []
        self.table = ProducerTable()
        self.inflight: set[tuple[int, int]] = set()
        self.requests: dict[int, WriteRequest] = {}  # writer's write id -> request
        self.writer: LogWriterState | None = None
        self.open: _Open | None = None
        self.segments: tuple[SimSegment, ...] = ()
        self.segments_version = -1
        self.max_txid = -1
        self.summary: w.SegmentSummary | None = None  # of the segment being completed

    # -- requests ------------------------------------------------------------------------------

    def write(self, request: WriteRequest) -> None:
        if self.phase is Phase.TAKING_OVER:
            self.waiting.append(request)
            return
        if self.phase in (Phase.CLOSING, Phase.DONE) or self.writer is None:
            request.reply("unavailable", None, f"stream is {self.phase.value}")
            return
        if self.writer.room <= 0:
            request.reply("unavailable", None, "over capacity")
            return
        if request.producer is not None:
            landed = self.table.lookup(*request.producer)
            if landed is not None:
                request.reply("ok", landed.dlsn, "already written")
                return
            if request.producer in self.inflight:
                request.reply("busy", None, "producer seq in flight")
                return
            self.inflight.add(request.producer)
        record = Record(request.value.to_bytes(8, "big"), producer=request.producer)
        write_id = self.writer.write(record, int(self.world.now * 1000))
        self.requests[write_id] = request
        self.pump()

    def seal(self, reply: Callable[[str, DLSN | None, str], None]) -> None:
        self.seals.append(reply)
        if self.phase is Phase.WRITING and self.writer is not None:
            self.phase = Phase.CLOSING
            self.writer.close()
            self.pump()
        elif self.phase is Phase.DONE:
            self._answer_seals("unavailable", "the owner gave the stream up")

    # -- takeover ------------------------------------------------------------------------------

    def take_over(self) -> None:
        self.world.timer(self.proxy.name, TAKEOVER_S, self._takeover_deadline)
        name = self.proxy.name
        directory = lock_dir(self.stream)

        def lock(session: int) -> tuple[str, str | None]:
            zk = self.proxy.zk.zk
            path = zk.create(
                f"{directory}/owner-", name, session=session, sequential=True, make_parents=True
            )
            for child in zk.children(directory):  # this process's own stale lock nodes go
                stale = f"{directory}/{child}"
                stat = zk.exists(stale)
                if stale != path and stat is not None and stat.ephemeral_owner == session:
                    zk.delete(stale, version=-1)
            lowest = zk.children(directory)[0]
            holder, _ = zk.get(f"{directory}/{lowest}")
            return path, (None if f"{directory}/{lowest}" == path else holder)

        def locked(result: Any, error: Exception | None) -> None:
            if self._over():
                return
            if error is not None:
                self.give_up("unavailable", f"lock: {error}")
                return
            self.lock, holder = result
            if holder is not None:
                self.give_up("redirect", holder)
                return
            self.proxy.zk.call(
                lambda _: self.proxy.zk.zk.get(segments_path(self.stream)),
                read_segments,
                write=False,
            )

        def read_segments(result: Any, error: Exception | None) -> None:
            if self._over():
                return
            if error is not None:
                self.give_up("unavailable", f"segments: {error}")
                return
            (segments, self.max_txid), stat = result
            self.segments, self.segments_version = segments, stat.version
            if segments and not segments[-1].completed:
                self._recover(segments[-1])
            else:
                self._rebuild()

        self.proxy.zk.call(lock, locked, write=True)

    def _recover(self, segment: SimSegment) -> None:
        path = ledger_path(segment.ledger_id)

        def to_recovery(session: int) -> tuple[LedgerMetadata, int]:
            zk = self.proxy.zk.zk
            metadata, stat = zk.get(path)
            if metadata.state is LedgerState.OPEN:
                metadata = dataclasses.replace(metadata, state=LedgerState.IN_RECOVERY)
                stat = zk.set(path, metadata, version=stat.version)
            return metadata, stat.version

        def marked(result: Any, error: Exception | None) -> None:
            if self._over():
                return
            if error is not None:
                self.give_up("unavailable", f"recovery: {error}")
                return
            metadata, version = result
            if metadata.state is LedgerState.CLOSED:
                self._complete(segment, metadata)
            else:
                Recovery(self, segment, metadata, version).start()

        self.proxy.zk.call(to_recovery, marked, write=True)

    def _complete(self, segment: SimSegment, metadata: LedgerMetadata) -> None:
        """Completes the recovered segment from its last entry, then rebuilds."""
        last = metadata.last_entry_id

        def read(result: dict[int, bytes] | str) -> None:
            if self._over():
                return
            if isinstance(result, str):
                self.give_up("unavailable", f"reading the recovered tail: {result}")
                return
            count = 0
            if last >= 0:
                entry = decode_entry(result[last])
                count = entry.first_position + user_record_count(entry.records)
            done = dataclasses.replace(
                segment, completed=True, record_count=count, last_entry_id=last
            )
            self._commit_segments((*self.segments[:-1], done), self._rebuild)

        fetch_entries(
            self.world, self.proxy.link, metadata, segment.ledger_id, max(last, 0), last, read
        )

    def _rebuild(self) -> None:
        """The producer table from every completed segment, then a new segment."""
        if self.proxy.machines.forgets_producers:
            self._start_segment()
            return
        todo = [s for s in self.segments if s.completed and s.last_entry_id >= 0]

        def next_segment() -> None:
            if not todo:
                self._start_segment()
                return
            segment = todo.pop(0)

            def got(metadata: Any, error: Exception | None) -> None:
                if self._over():
                    return
                if error is not None:
                    self.give_up("unavailable", f"rebuild: {error}")
                    return
                fetch_entries(
                    self.world,
                    self.proxy.link,
                    metadata[0],
                    segment.ledger_id,
                    0,
                    segment.last_entry_id,
                    lambda result: read(segment, result),
                )

            self.proxy.zk.call(
                lambda _: self.proxy.zk.zk.get(ledger_path(segment.ledger_id)), got, write=False
            )

        def read(segment: SimSegment, result: dict[int, bytes] | str) -> None:
            if self._over():
                return
            if isinstance(result, str):
                self.give_up("unavailable", f"rebuild: {result}")
                return
            for entry_id in sorted(result):
                for record in decode_records(
                    result[entry_id], segment.sequence, entry_id, segment.first_seq
                ):
                    if record.producer is not None:
                        self.table.record(*record.producer, w.Written(record.dlsn, 0, record.seq))
            next_segment()

        next_segment()

    def _start_segment(self) -> None:
        """A new ledger (one bookie per region) and its segment, then writing."""
        previous = self.segments[-1] if self.segments else None
        sequence = previous.sequence + 1 if previous else 1
        first_seq = previous.first_seq + previous.record_count if previous else 0
        ensemble = self._ensemble()

        def create(session: int) -> tuple[int, LedgerMetadata]:
            zk = self.proxy.zk.zk
            made = zk.create("/idgen/ledger-", b"", sequential=True, make_parents=True)
            ledger_id = int(made.rsplit("-", 1)[1]) + 1
            metadata = LedgerMetadata(
                ensemble_size=len(ensemble),
                write_quorum=WRITE_QUORUM,
                ack_quorum=ACK_QUORUM,
                ensembles=(Ensemble(0, ensemble),),
                digest_type=DigestType.CRC32C,
                password=b"",
            )
            zk.create(ledger_path(ledger_id), metadata)
            return ledger_id, metadata

        def created(result: Any, error: Exception | None) -> None:
            if self._over():
                return
            if error is not None:
                self.give_up("unavailable", f"new ledger: {error}")
                return
            ledger_id, metadata = result
            segment = SimSegment(sequence, ledger_id, first_seq)

            def opened() -> None:
                adds = self.proxy.machines.add_state(
                    ensemble, WRITE_QUORUM, ACK_QUORUM, now_s=self.world.now
                )
                self.open = _Open(segment, metadata, 0, adds)
                if self.writer is None:
                    start = SegmentStart(sequence, first_seq, self.max_txid)
                    self.writer = LogWriterState(self.stream, SETTINGS, start, self.world.now)
                    self.phase = Phase.WRITING
                    self._tick()
                    waiting, self.waiting = self.waiting, []
                    for request in waiting:
                        self.write(request)
                    if self.seals:
                        self.seal_again()
                else:
                    self.writer.handle(w.SegmentStarted(sequence, first_seq, self.world.now))
                    if self.phase is Phase.ROLLING:
                        self.phase = Phase.WRITING
                        if self.seals:
                            self.seal_again()
                self.pump()

            self._commit_segments((*self.segments, segment), opened)

        self.proxy.zk.call(create, created, write=True)

    def seal_again(self) -> None:
        seals, self.seals = self.seals, []
        for reply in seals:
            self.seal(reply)

    def _ensemble(self, avoid: tuple[str, ...] = ()) -> tuple[str, ...]:
        rng, world = self.world.rng, self.world
        chosen = []
        for region in world.regions():
            names = sorted(b for b in self.proxy.bookies if world.nodes[b].region == region)
            chosen.append(rng.choice([b for b in names if b not in avoid] or names))
        return tuple(chosen)

    def _commit_segments(self, segments: tuple[SimSegment, ...], then: Callable[[], None]) -> None:
        lock, version = self.lock, self.segments_version
        max_txid = self.writer.last_txid if self.writer is not None else self.max_txid
        assert lock is not None

        def commit(session: int) -> Any:
            ops = [
                Op("check", lock, version=0),
                Op("set", segments_path(self.stream), (segments, max_txid), version=version),  # type: ignore[arg-type]
            ]
            return self.proxy.zk.zk.commit(ops)

        def committed(result: Any, error: Exception | None) -> None:
            if self._over():
                return
            if error is not None:
                self.fail(w.FailureKind.ROLL, f"segments: {error}")
                return
            self.segments, self.segments_version = segments, result[1].version
            then()

        self.proxy.zk.call(commit, committed, write=True)

    # -- writing -------------------------------------------------------------------------------

    def pump(self) -> None:
        while not self._over():
            opened = self.open
            ledger_actions = opened.adds.take_actions() if opened is not None else []
            writer_actions = self.writer.take_actions() if self.writer is not None else []
            if not ledger_actions and not writer_actions:
                error = self.writer.error if self.writer is not None else None
                if error is not None:  # failed with nothing pending: no FailWrites came
                    self.give_up("unavailable", f"writer failed: {error[1]}")
                return
            for ledger_action in ledger_actions:
                self._ledger_action(opened, ledger_action)  # type: ignore[arg-type]
            for writer_action in writer_actions:
                self._writer_action(writer_action)

    def _writer_action(self, action: w.WriterAction) -> None:
        opened = self.open
        match action:
            case w.TransmitEntry():
                assert opened is not None
                body = encode_entry(
                    action.records,
                    first_position=action.first_position,
                    write_time_ms=int(self.world.now * 1000),
                    region=self.proxy.region,
                )
                entry_id = opened.adds.submit(len(body))
                if entry_id is None:
                    error = opened.adds.error
                    fenced = error is not None and error.kind is AddErrorKind.FENCED
                    kind = w.FailureKind.FENCED if fenced else w.FailureKind.TRANSMIT
                    self.writer.handle(w.EntryFailed(action.transmit_id, kind, "ledger failed"))  # type: ignore[union-attr]
                else:
                    opened.pending[entry_id] = (action.transmit_id, body)
            case w.CompleteWrites():
                for write_id, written in action.results:
                    request = self.requests.pop(write_id)
                    if request.producer is not None:
                        self.table.record(*request.producer, written)
                        self.inflight.discard(request.producer)
                    request.reply("ok", written.dlsn, "")
            case w.FailWrites():
                for write_id in action.write_ids:
                    request = self.requests.pop(write_id)
                    if request.producer is not None:
                        self.inflight.discard(request.producer)
                    request.reply("indeterminate", None, f"{action.kind.value}: {action.reason}")
                self.give_up("unavailable", f"writer failed: {action.reason}")
            case w.RollSegment() | w.CloseSegment():
                assert opened is not None
                self.summary = action.summary
                self.phase = Phase.ROLLING if isinstance(action, w.RollSegment) else Phase.CLOSING
                opened.adds.begin_close()

    def _ledger_action(self, opened: _Open, action: Any) -> None:
        match action:
            case SendAdd():
                _, body = opened.pending[action.entry_id]
                self._send_add(opened, action, body)
            case CompleteAdds():
                for entry_id in range(action.first_entry_id, action.last_entry_id + 1):
                    transmit_id, _ = opened.pending.pop(entry_id)
                    self.writer.handle(w.EntryAcked(transmit_id, entry_id))  # type: ignore[union-attr]
            case FailAdds():
                fenced = action.error.kind is AddErrorKind.FENCED
                kind = w.FailureKind.FENCED if fenced else w.FailureKind.TRANSMIT
                for entry_id in action.entry_ids:
                    transmit_id, _ = opened.pending.pop(entry_id)
                    self.writer.handle(w.EntryFailed(transmit_id, kind, action.error.message))  # type: ignore[union-attr]
            case ChangeEnsemble():
                self._change_ensemble(opened, action)
            case CloseLedger():
                self._close_ledger(opened, action)
            case FailClose():
                if self.writer is not None and not self.writer.is_terminal:
                    self.writer.handle(w.WriterFailed(w.FailureKind.ROLL, action.error.message))

    def _send_add(self, opened: _Open, action: SendAdd, body: bytes) -> None:
        adds = opened.adds
        entry = StoredEntry(action.lac, action.length, body)

        def answer(result: Any) -> None:
            if self._over() or self.open is not opened:
                return
            if isinstance(result, BookieFailure):
                adds.handle(AddFailed(action.entry_id, action.bookie, result))
            else:
                adds.handle(AddAcked(action.entry_id, action.bookie))
            self.pump()

        self.proxy.link.add(
            action.bookie, opened.segment.ledger_id, action.entry_id, entry, action.recovery, answer
        )

    def _change_ensemble(self, opened: _Open, action: ChangeEnsemble) -> None:
        current = opened.adds.ensemble
        replacement = list(current)
        fresh = self._ensemble(avoid=current)
        for index in action.indices:
            replacement[index] = fresh[index] if fresh[index] not in current else current[index]
        ensemble = tuple(replacement)
        path = ledger_path(opened.segment.ledger_id)

        def change(session: int) -> Any:
            zk = self.proxy.zk.zk
            metadata, stat = zk.get(path)
            if metadata.state is not LedgerState.OPEN:
                return metadata.state
            ensembles = [e for e in metadata.ensembles if e.first_entry_id < action.first_entry_id]
            ensembles.append(Ensemble(action.first_entry_id, ensemble))
            metadata = dataclasses.replace(metadata, ensembles=tuple(ensembles))
            return metadata, zk.set(path, metadata, version=stat.version).version

        def changed(result: Any, error: Exception | None) -> None:
            if self._over() or self.open is not opened:
                return
            if error is not None:
                event: Any = EnsembleChangeFailed(AddErrorKind.ENSEMBLE_CHANGE_FAILED, str(error))
            elif isinstance(result, LedgerState):
                kind = (
                    AddErrorKind.FENCED
                    if result is LedgerState.IN_RECOVERY
                    else AddErrorKind.CLOSED
                )
                event = EnsembleChangeFailed(kind, f"the ledger metadata is {result.value}")
            else:
                opened.metadata, opened.version = result
                event = EnsembleChanged(action.first_entry_id, ensemble)
            opened.adds.handle(event)
            self.pump()

        self.proxy.zk.call(change, changed, write=True)

    def _close_ledger(self, opened: _Open, action: CloseLedger) -> None:
        path = ledger_path(opened.segment.ledger_id)

        def close(session: int) -> Any:
            zk = self.proxy.zk.zk
            metadata, stat = zk.get(path)
            if metadata.state is not LedgerState.OPEN:
                raise errors.BadVersionError(f"ledger is {metadata.state.value}")
            closed = dataclasses.replace(
                metadata,
                state=LedgerState.CLOSED,
                last_entry_id=action.last_entry_id,
                length=action.length,
            )
            zk.set(path, closed, version=stat.version)
            return closed

        def closed(result: Any, error: Exception | None) -> None:
            if self._over():
                return
            if error is not None:
                self.fail(w.FailureKind.ROLL, f"closing the ledger: {error}")
                return
            assert self.summary is not None
            done = dataclasses.replace(
                opened.segment,
                completed=True,
                record_count=self.summary.record_count,
                last_entry_id=action.last_entry_id,
            )
            segments = (*self.segments[:-1], done)
            if self.phase is Phase.CLOSING:
                self._commit_segments(segments, self._closed)
            else:
                self.segments = segments  # committed with the next segment's start
                self._commit_then_start(segments)

        self.proxy.zk.call(close, closed, write=True)

    def _commit_then_start(self, segments: tuple[SimSegment, ...]) -> None:
        self._commit_segments(segments, self._start_segment)

    def _closed(self) -> None:
        self.phase = Phase.DONE
        self._answer_seals("ok", "sealed")
        self._release()

    # -- ending --------------------------------------------------------------------------------

    def fail(self, kind: w.FailureKind, reason: str) -> None:
        if self.writer is not None and not self.writer.is_terminal:
            self.writer.handle(w.WriterFailed(kind, reason))
            self.pump()  # FailWrites answers the writes and gives the stream up
        self.give_up("unavailable", reason)

    def give_up(self, kind: str, detail: str) -> None:
        if self.phase is Phase.DONE:
            return
        self.phase = Phase.DONE
        for request in self.waiting:
            request.reply(kind, None, detail)
        self.waiting = []
        for request in list(self.requests.values()):
            request.reply("indeterminate", None, detail)
        self.requests.clear()
        self._answer_seals(kind, detail)
        self._release()

    def _answer_seals(self, kind: str, detail: str) -> None:
        seals, self.seals = self.seals, []
        for reply in seals:
            reply(kind, None, detail)

    def _release(self) -> None:
        self.proxy.forget(self)
        lock = self.lock
        if lock is not None and self.proxy.zk.connected:
            self.proxy.zk.call(
                lambda _: self.proxy.zk.zk.delete(lock, version=-1), lambda *_: None, write=True
            )

    def _over(self) -> bool:
        return self.phase is Phase.DONE or self.proxy.owners.get(self.stream) is not self

    def _takeover_deadline(self) -> None:
        if self.phase is Phase.TAKING_OVER and not self._over():
            self.give_up("unavailable", f"the takeover took over {TAKEOVER_S} s")

    def _tick(self) -> None:
        if self._over():
            return
        now = self.world.now
        if self.writer is not None:
            self.writer.handle(w.Ticked(now))
        if self.open is not None:
            self.open.adds.handle(Ticked(now))
        self.pump()
        self.world.timer(self.proxy.name, TICK_S, self._tick)


class Recovery:
    """Drives one RecoveryState for a takeover: fence, read forward, re-add, close."""

    def __init__(
        self, owner: StreamOwner, segment: SimSegment, metadata: LedgerMetadata, version: int
    ) -> None:
        self.owner, self.segment, self.metadata, self.version = owner, segment, metadata, version
        self.world = owner.world
        self.machine = owner.proxy.machines.recovery_state(metadata, now_s=self.world.now)
        self.kept: dict[int, bytes] = {}
        self._answers: dict[tuple[int, str], bytes] = {}
        self.ensemble = metadata.ensembles[-1].bookies

    def start(self) -> None:
        self.pump()
        self._tick()

    def _tick(self) -> None:
        if self.owner._over() or self.machine.is_terminal:
            return
        self.machine.handle(Ticked(self.world.now))
        self.pump()
        self.world.timer(self.owner.proxy.name, TICK_S * 5, self._tick)

    def pump(self) -> None:
        if self.owner._over():
            return
        for action in self.machine.take_actions():
            self._carry_out(action)

    def _carry_out(self, action: Any) -> None:
        link, ledger_id = self.owner.proxy.link, self.segment.ledger_id
        match action:
            case SendReadLac():
                link.request(
                    action.bookie,
                    lambda b: b.read_last(ledger_id, fence=action.fence),
                    lambda r: self._lac(action.bookie, r),
                )
            case SendRead():
                link.request(
                    action.bookie,
                    lambda b: b.read(ledger_id, action.entry_id, fence=action.fence),
                    lambda r: self._read(action.entry_id, action.bookie, r),
                )
            case CompleteRead():
                self.kept[action.entry_id] = self._answers[(action.entry_id, action.bookie)]
            case SendAdd():
                entry = StoredEntry(action.lac, action.length, self.kept[action.entry_id])

                def added(result: Any) -> None:
                    if isinstance(result, BookieFailure):
                        self._feed(AddFailed(action.entry_id, action.bookie, result))
                    else:
                        self._feed(AddAcked(action.entry_id, action.bookie))

                link.add(action.bookie, ledger_id, action.entry_id, entry, True, added)
            case ChangeEnsemble():
                fresh = self.owner._ensemble(avoid=self.ensemble)
                replacement = list(self.ensemble)
                for index in action.indices:
                    replacement[index] = fresh[index]
                self.ensemble = tuple(replacement)
                self._feed(EnsembleChanged(action.first_entry_id, self.ensemble))
            case CloseLedger():
                self._close(action)
            case FailRecovery():
                self.owner.give_up("unavailable", f"recovery failed: {action.message}")

    def _feed(self, event: Any) -> None:
        if self.owner._over() or self.machine.is_terminal:
            return
        self.machine.handle(event)
        self.pump()

    def _lac(self, bookie: str, result: Any) -> None:
        if isinstance(result, BookieFailure):
            self._feed(LacReadFailed(bookie, result))
        else:
            _, stored = result
            self._feed(LacReplied(bookie, stored.lac, stored.length))

    def _read(self, entry_id: int, bookie: str, result: Any) -> None:
        if isinstance(result, BookieFailure):
            self._feed(EntryReadFailed(entry_id, bookie, result))
        else:
            self._answers[(entry_id, bookie)] = result.body
            self._feed(EntryRead(entry_id, bookie, len(result.body), result.length))

    def _close(self, action: CloseLedger) -> None:
        path, version = ledger_path(self.segment.ledger_id), self.version

        def close(session: int) -> LedgerMetadata:
            zk = self.owner.proxy.zk.zk
            metadata, _ = zk.get(path)
            ensembles = list(metadata.ensembles)
            for change in action.ensembles:
                ensembles = [e for e in ensembles if e.first_entry_id < change.first_entry_id] + [
                    change
                ]
            closed = dataclasses.replace(
                metadata,
                ensembles=tuple(ensembles),
                state=LedgerState.CLOSED,
                last_entry_id=action.last_entry_id,
                length=action.length,
            )
            zk.set(path, closed, version=version)
            return closed  # type: ignore[no-any-return]

        def closed(result: Any, error: Exception | None) -> None:
            if self.owner._over():
                return
            if error is not None:
                self.owner.give_up("unavailable", f"closing the recovered ledger: {error}")
                return
            self.owner._complete(self.segment, result)

        self.owner.proxy.zk.call(close, closed, write=True)
