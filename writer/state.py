"""The log writer of one stream as a pure state machine: buffer, transmit, acks, roll, close.

Events in, actions out, no IO; time is an input (DistributedLog's BKLogSegmentWriter and
BKAsyncLogWriter, sans-IO):

- `write(payload, txid, now_s)` buffers a record and gives its write id. The transmit policy
  says when the buffer goes out as one entry (`TransmitEntry`): at once (immediate), every
  flush interval (periodic), or once `buffer_bytes` are buffered (size); an entry never
  holds more than ENTRY_RECORDS_BYTES_MAX of records.
- Acks arrive in entry order (`EntryAcked`); each gives `CompleteWrites` with the DLSN of
  every record of the entry, in order.
- The LAC rides on the next entry, so after an ack the writer owes readers a later entry
  within the flush SLA: if no data entry goes out by then, it transmits a control record.
- Rolling (by size or age) stops transmitting, waits for the entries in flight, then emits
  `RollSegment`; buffered writes go to the next segment once `SegmentStarted` arrives.
- The first failure (an add, a roll, the ownership lock) fails every pending write with the
  same error; the writer is finished (the caller reopens one). A fenced ledger means another
  owner took the stream.
- `close()` transmits the buffer, waits for the acks and emits `CloseSegment`;
  `mark_end_of_stream()` does the same after an end-of-stream record.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from core.dlsn import DLSN
from core.errors import (
    EndOfStreamError,
    OwnerFencedError,
    RecordTooLargeError,
    StreamError,
    TxidOutOfOrderError,
    WriteFailedError,
    WriterClosedError,
)
from core.records import (
    ENTRY_RECORDS_BYTES_MAX,
    NO_POSITION,
    RECORD_BYTES_MAX,
    TXID_MAX,
    Record,
    RecordFlag,
    StoredRecord,
    producer_payload,
)
from core.streams import StreamSettings, TransmitPolicy
from writer.events import (
    CloseSegment,
    CompleteWrites,
    EntryAcked,
    EntryFailed,
    FailureKind,
    FailWrites,
    RollRequested,
    RollSegment,
    SegmentStarted,
    SegmentSummary,
    Ticked,
    TransmitEntry,
    WriterAction,
    WriterEvent,
    WriterFailed,
    Written,
)

CONTROL_PAYLOAD = b"control"
SESSION_PAYLOAD = b"session"
END_OF_STREAM_PAYLOAD = b"end-of-stream"


class Phase(enum.Enum):
    OPEN = "open"
    ROLLING = "rolling"  # waiting for the entries in flight, then for SegmentStarted
    CLOSING = "closing"  # close() or mark_end_of_stream(): waiting for the entries in flight
    CLOSED = "closed"  # CloseSegment emitted (terminal)
    FAILED = "failed"  # every pending write failed (terminal)


@dataclass(slots=True)
class _Transmit:
    transmit_id: int
    write_ids: Sequence[int]  # one per record; a control record's is -1
    records: Sequence[StoredRecord]
    user_records: int


@dataclass(frozen=True, slots=True)
class SegmentStart:
    """Where the writer's current segment begins (from its metadata)."""

    sequence: int
    first_seq: int
    max_txid: int  # the stream's max txid when it started: writes never go below it


class LogWriterState:
    """The writes of one stream's owner. Feed `write`, `flush`, `close`, `handle`; drain
    `take_actions()` after each call and carry them out in order."""

    def __init__(
        self, stream: str, settings: StreamSettings, start: SegmentStart, now_s: float
    ) -> None:
        self.stream = stream
        self.settings = settings
        self._now_s = now_s
        self._sequence = start.sequence
        self._first_seq = start.first_seq
        self._segment_started_s = now_s
        self._segment_bytes = 0
        self._position = 0  # user records transmitted in this segment
        self._last_txid = start.max_txid  # the highest txid accepted so far
        self._last_acked_txid = start.max_txid
        self._last_dlsn: DLSN | None = None  # of this segment's last acknowledged user record
        self._acked_count = 0  # user records acknowledged in this segment
        self._next_write_id = 0
        self._next_transmit_id = 0
        # Buffered records, not yet transmitted; their write ids are consecutive and end just
        # before _next_write_id. Control and end records among them take no sequence id.
        self._buffer: list[StoredRecord] = []
        self._buffer_bytes = 0
        self._buffer_unpositioned = 0
        self._in_flight: deque[_Transmit] = deque()
        self._pending_writes = 0  # accepted, not yet completed or failed
        self._acked_entry = -1  # the highest entry acknowledged in this segment
        self._acked_data_entry = -1  # ... of those carrying records readers are owed
        self._visible_entry = -1  # the LAC the newest transmitted entry carries
        self._flush_due_s: float | None = None  # periodic policy: when the buffer goes out
        self._control_due_s: float | None = None  # when readers are owed a newer LAC
        self._end_of_stream = False
        self._close_requested = False
        self._roll_emitted = False
        self._phase = Phase.OPEN
        self._error: tuple[FailureKind, str] | None = None
        self._actions: list[WriterAction] = []

    # ------------------------------------------------------------------------ observers

    @property
    def phase(self) -> Phase:
        return self._phase

    @property
    def sequence(self) -> int:
        return self._sequence

    @property
    def last_txid(self) -> int:
        return self._last_txid

    @property
    def pending_writes(self) -> int:
        return self._pending_writes

    @property
    def next_seq(self) -> int:
        """The sequence id the next accepted record will get (if every pending write lands)."""
        buffered = len(self._buffer) - self._buffer_unpositioned
        return self._first_seq + self._position + buffered

    @property
    def room(self) -> int:
        return self.settings.pending_writes_max - self._pending_writes

    @property
    def error(self) -> tuple[FailureKind, str] | None:
        return self._error

    @property
    def is_terminal(self) -> bool:
        return self._phase in (Phase.CLOSED, Phase.FAILED)

    @property
    def flush_due_s(self) -> float | None:
        """When the buffered records go out if nothing sends them before (None: no wait)."""
        return self._flush_due_s

    def next_wakeup_s(self) -> float | None:
        """When the next flush, control record or time roll is due (called after every
        input, so it allocates nothing)."""
        if self._phase is Phase.CLOSED or self._phase is Phase.FAILED:
            return None
        due = self._flush_due_s
        control = self._control_due_s
        if control is not None and (due is None or control < due):
            due = control
        if self._phase is Phase.OPEN and self._position > 0:
            roll = self._segment_started_s + self.settings.segment_roll_s
            if due is None or roll < due:
                due = roll
        return due

    @property
    def has_actions(self) -> bool:
        return bool(self._actions)

    def take_actions(self) -> list[WriterAction]:
        actions, self._actions = self._actions, []
        return actions

    # --------------------------------------------------------------------------- inputs

    def check_write(self, record: Record) -> None:
        """Raises the error `write` would give, without changing anything."""
        if self._phase is Phase.FAILED:
            raise self.failure()
        if self._end_of_stream:
            raise EndOfStreamError(f"stream {self.stream!r} was sealed with an end of stream")
        if self._close_requested or self._phase in (Phase.CLOSING, Phase.CLOSED):
            raise WriterClosedError(f"stream {self.stream!r}: the writer is closed")
        if len(record.payload) > RECORD_BYTES_MAX:
            raise RecordTooLargeError(
                f"append to stream {self.stream!r}: record is {len(record.payload)} bytes; "
                f"the limit is {RECORD_BYTES_MAX}"
            )
        record.check(self.stream)
        if record.txid is not None and record.txid < self._last_txid:
            raise TxidOutOfOrderError(
                f"append to stream {self.stream!r}: txid {record.txid} is below the stream's "
                f"last txid {self._last_txid}; txids never go backwards"
            )

    def check_batch(self, records: Sequence[Record | bytes]) -> None:
        """Raises the error `write_batch` would give for any of `records` (naming the first
        bad one), without changing anything."""
        self.check_write(Record(b""))  # the writer's own state: failed, sealed or closed
        last_txid = self._last_txid
        for index, record in enumerate(records):
            payload, txid = (
                (record, None) if isinstance(record, bytes) else (record.payload, record.txid)
            )
            if len(payload) > RECORD_BYTES_MAX:
                raise RecordTooLargeError(
                    f"append to stream {self.stream!r}: record {index} of the batch is "
                    f"{len(payload)} bytes; the limit is {RECORD_BYTES_MAX}"
                )
            if txid is not None:
                if not 0 <= txid <= TXID_MAX:
                    Record(payload, txid).check(self.stream)
                if txid < last_txid:
                    raise TxidOutOfOrderError(
                        f"append to stream {self.stream!r}: record {index} of the batch has "
                        f"txid {txid}, below {last_txid} before it; txids never go backwards"
                    )
                last_txid = txid

    def write(self, record: Record, now_ms: int, *, checked: bool = False) -> int:
        """Accepts one record; its write id. Needs `room` > 0.

        `checked`: the caller ran `check_write` on it (and on every record before it in a
        batch, with nothing else in between), so it is not checked twice.
        """
        payload, given = record.payload, record.txid
        size = len(payload)
        # The common write (an open writer, no txid given, a payload within the limit) passes
        # check_write: only the others take it, which keeps a record's path short.
        if not checked and (
            self._phase is not Phase.OPEN
            or given is not None
            or size > RECORD_BYTES_MAX
            or self._end_of_stream
        ):
            self.check_write(record)
        assert self._pending_writes < self.settings.pending_writes_max, (
            "write() without room: the driver waits for room first"
        )
        txid = given if given is not None else min(max(self._last_txid, now_ms), TXID_MAX)
        self._last_txid = txid
        write_id = self._next_write_id
        self._next_write_id = write_id + 1
        self._pending_writes += 1
        if self._buffer_bytes + size > ENTRY_RECORDS_BYTES_MAX:
            self._transmit_buffer()  # the entry would overflow: send what is buffered first
        if record.producer is None:
            stored = StoredRecord(txid, RecordFlag.NONE, payload)
        else:
            stored = StoredRecord(
                txid, RecordFlag.PRODUCER, producer_payload(*record.producer, record.payload)
            )
            size = len(stored.payload)
        self._buffer.append(stored)
        self._buffer_bytes += size
        self._after_buffering()
        return write_id

    def write_batch(self, records: Sequence[Record | bytes], now_ms: int) -> int:
        """Accepts records in order, checked by `check_batch` with nothing in between (a
        bytes item is a record whose txid the writer assigns); the first one's write id, the
        others' follow it.

        One call per batch instead of one per record: entries fill to the buffer size (or the
        entry limit) as they would record by record. Needs `room` >= len(records).
        """
        assert self.room >= len(records), "write_batch() without room for the whole batch"
        # A record without a txid gets the time, or the highest txid before it if higher.
        floor = min(max(self._last_txid, now_ms), TXID_MAX)
        first_id = write_id = self._next_write_id
        buffer = self._buffer
        buffered = self._buffer_bytes  # kept in a local; stored before each transmit
        full_at = min(self.settings.buffer_bytes, ENTRY_RECORDS_BYTES_MAX)
        open_phase = self._phase is Phase.OPEN
        no_flags = RecordFlag.NONE
        txid = self._last_txid
        for record in records:
            flags = no_flags
            if isinstance(record, bytes):
                payload, txid = record, floor
            else:
                payload, given = record.payload, record.txid
                if given is None:
                    txid = floor
                else:
                    txid, floor = given, max(floor, given)
                if record.producer is not None:
                    flags = RecordFlag.PRODUCER
                    payload = producer_payload(*record.producer, payload)
            size = len(payload)
            if buffered + size > ENTRY_RECORDS_BYTES_MAX:
                self._buffer_bytes, self._next_write_id = buffered, write_id
                self._transmit_buffer()  # the entry would overflow: send what is buffered first
                buffer, buffered = self._buffer, self._buffer_bytes
            buffer.append(StoredRecord(txid, flags, payload))
            write_id += 1
            buffered += size
            if open_phase and buffered >= full_at:
                self._buffer_bytes, self._next_write_id = buffered, write_id
                self._transmit_buffer()
                buffer, buffered = self._buffer, self._buffer_bytes
                open_phase = self._phase is Phase.OPEN
        self._buffer_bytes = buffered
        self._last_txid = txid
        self._next_write_id = write_id
        self._pending_writes += write_id - first_id
        self._after_buffering()
        return first_id

    def flush(self) -> None:
        """Transmits whatever is buffered now (the caller's explicit flush)."""
        if self._phase is Phase.OPEN:
            self._transmit_buffer()

    def close(self) -> None:
        """Transmits the buffer, waits for every ack, then emits CloseSegment."""
        if self._close_requested or self.is_terminal:
            return
        self._close_requested = True
        if self._phase is Phase.OPEN:
            self._phase = Phase.CLOSING
            self._transmit_buffer(force=True)
        self._maybe_finish()

    def mark_session(self, now_ms: int) -> int:
        """Writes a control record whose txid is above every earlier one: a session id for
        session writes (readers never see it); its write id, whose completion gives the txid."""
        self.check_write(Record(b""))
        txid = min(max(self._last_txid + 1, now_ms), TXID_MAX)
        self._last_txid = txid
        write_id = self._next_write_id
        self._next_write_id += 1
        self._pending_writes += 1
        self._buffer.append(StoredRecord(txid, RecordFlag.CONTROL, SESSION_PAYLOAD))
        self._buffer_unpositioned += 1
        if self._phase is Phase.OPEN:
            self._transmit_buffer()
        return write_id

    def mark_end_of_stream(self, now_ms: int) -> int:
        """Seals the stream after the buffered records; the write id of the end record."""
        record = Record(END_OF_STREAM_PAYLOAD)
        self.check_write(record)
        txid = min(max(self._last_txid, now_ms), TXID_MAX)
        self._last_txid = txid
        write_id = self._next_write_id
        self._next_write_id += 1
        self._pending_writes += 1
        stored = StoredRecord(txid, RecordFlag.END_OF_STREAM, END_OF_STREAM_PAYLOAD)
        self._buffer.append(stored)
        self._buffer_unpositioned += 1
        self._end_of_stream = True
        if self._phase is Phase.OPEN:
            self._transmit_buffer()
        self.close()
        return write_id

    def handle(self, event: WriterEvent) -> None:
        if isinstance(event, Ticked):
            self._now_s = max(self._now_s, event.now_s)
        if self.is_terminal:
            return
        match event:
            case EntryAcked():
                self._on_acked(event)
            case EntryFailed():
                self._fail(event.kind, event.reason)
            case WriterFailed():
                self._fail(event.kind, event.reason)
            case SegmentStarted():
                self._on_segment_started(event)
            case Ticked():
                self._on_tick()
            case RollRequested():
                if self._phase is Phase.OPEN and (self._acked_entry >= 0 or self._in_flight):
                    self._begin_roll()

    # --------------------------------------------------------------------------- events

    def _on_acked(self, event: EntryAcked) -> None:
        assert self._in_flight, f"ack without an entry in flight: {event}"
        transmit = self._in_flight.popleft()
        assert transmit.transmit_id == event.transmit_id, (transmit.transmit_id, event)
        seq = self._first_seq + self._acked_count
        segment, entry = self._sequence, event.entry_id
        pairs = zip(transmit.write_ids, transmit.records, strict=True)
        results: list[tuple[int, Written]]
        if transmit.user_records == len(transmit.records):
            # only user records (the common entry): each takes the next sequence id
            results = [
                (write_id, Written(DLSN(segment, entry, slot), record.txid, seq + slot))
                for slot, (write_id, record) in enumerate(pairs)
            ]
            self._last_dlsn = results[-1][1].dlsn
        else:
            results = []
            for slot, (write_id, record) in enumerate(pairs):
                if write_id < 0:
                    continue  # a control record: nobody waits for it
                dlsn = DLSN(segment, entry, slot)
                if record.flags and record.flags & NO_POSITION:
                    results.append((write_id, Written(dlsn, record.txid, -1)))
                else:
                    results.append((write_id, Written(dlsn, record.txid, seq)))
                    self._last_dlsn = dlsn
                    seq += 1
        # txids never go down within an entry: its last record holds the highest
        self._last_acked_txid = max(self._last_acked_txid, transmit.records[-1].txid)
        self._acked_count += transmit.user_records
        self._pending_writes -= len(results)
        self._acked_entry = event.entry_id
        if results:
            self._acked_data_entry = event.entry_id
            self._actions.append(CompleteWrites(tuple(results)))
        if self._acked_data_entry > self._visible_entry and self._control_due_s is None:
            self._control_due_s = self._now_s + self.settings.flush_sla_s
        self._maybe_finish()

    def _on_tick(self) -> None:
        if self._flush_due_s is not None and self._now_s >= self._flush_due_s:
            self._flush_due_s = None
            if self._phase is Phase.OPEN:
                self._transmit_buffer()
        if self._control_due_s is not None and self._now_s >= self._control_due_s:
            self._control_due_s = None
            if self._phase is Phase.OPEN and self._acked_data_entry > self._visible_entry:
                self._transmit_control()
        if self._phase is Phase.OPEN and self._roll_due():
            self._begin_roll()

    def _on_segment_started(self, event: SegmentStarted) -> None:
        assert self._phase is Phase.ROLLING and not self._in_flight, self._phase
        self._sequence = event.sequence
        self._first_seq = event.first_seq
        self._segment_started_s = event.now_s
        self._segment_bytes = 0
        self._position = 0
        self._acked_count = 0
        self._last_dlsn = None
        self._acked_entry = -1
        self._acked_data_entry = -1
        self._visible_entry = -1
        self._control_due_s = None
        self._roll_emitted = False
        if self._close_requested:
            self._phase = Phase.CLOSING
            self._transmit_buffer(force=True)
            self._maybe_finish()
            return
        self._phase = Phase.OPEN
        self._after_buffering()

    # -------------------------------------------------------------------------- helpers

    def _after_buffering(self) -> None:
        if self._phase is not Phase.OPEN or not self._buffer:
            return
        policy = self.settings.transmit
        full = self._buffer_bytes >= self.settings.buffer_bytes
        if policy is TransmitPolicy.IMMEDIATE or full:
            self._transmit_buffer()
            return
        if self._flush_due_s is None:
            wait_s = (
                self.settings.flush_interval_s
                if policy is not TransmitPolicy.SIZE
                else self.settings.flush_sla_s
            )
            self._flush_due_s = self._now_s + wait_s

    def _roll_due(self) -> bool:
        if self._position == 0 and not self._in_flight:
            return False  # an empty segment never rolls
        aged = self._now_s - self._segment_started_s >= self.settings.segment_roll_s
        return aged or self._segment_bytes >= self.settings.segment_roll_bytes

    def _transmit_buffer(self, *, force: bool = False) -> None:
        if not self._buffer:
            return
        if not force and self._phase is not Phase.OPEN:
            return
        if self._roll_due() and not force:
            self._begin_roll()
            return
        while self._buffer:
            records = self._buffer
            first_id = self._next_write_id - len(records)
            if self._buffer_bytes <= ENTRY_RECORDS_BYTES_MAX:
                sent_bytes, self._buffer = self._buffer_bytes, []
            else:  # buffered while a segment rolled: more than one entry holds
                cut = _entry_cut(records)
                records, self._buffer = records[:cut], records[cut:]
                sent_bytes = sum(len(r.payload) for r in records)
            self._buffer_bytes = max(0, self._buffer_bytes - sent_bytes)
            unpositioned = 0
            if self._buffer_unpositioned:
                unpositioned = sum(1 for r in records if r.flags and r.flags & NO_POSITION)
                self._buffer_unpositioned -= unpositioned
            self._segment_bytes += sent_bytes
            self._flush_due_s = None
            write_ids = range(first_id, first_id + len(records))
            self._send(
                _Transmit(self._next_transmit_id, write_ids, records, len(records) - unpositioned)
            )
            if self._buffer and not force and self._roll_due():
                self._begin_roll()  # the rest goes into the next segment
                return

    def _transmit_control(self) -> None:
        record = StoredRecord(self._last_txid, RecordFlag.CONTROL, CONTROL_PAYLOAD)
        self._send(_Transmit(self._next_transmit_id, (-1,), (record,), 0))

    def _send(self, transmit: _Transmit) -> None:
        self._next_transmit_id += 1
        self._in_flight.append(transmit)
        first_position = self._position
        self._position += transmit.user_records
        self._visible_entry = self._acked_entry
        self._control_due_s = None
        self._actions.append(TransmitEntry(transmit.transmit_id, transmit.records, first_position))

    def _begin_roll(self) -> None:
        self._phase = Phase.ROLLING
        self._flush_due_s = None
        self._control_due_s = None
        self._maybe_finish()

    def _summary(self) -> SegmentSummary:
        return SegmentSummary(
            self._sequence,
            self._last_acked_txid,
            self._last_dlsn,
            self._acked_count,
            self._end_of_stream,
        )

    def _maybe_finish(self) -> None:
        """Emits the roll or the close once nothing is in flight."""
        if self._in_flight:
            return
        if self._phase is Phase.ROLLING and not self._roll_emitted:
            if self._close_requested and not self._buffer:
                self._phase = Phase.CLOSING  # nothing for a next segment: close this one
            else:
                self._roll_emitted = True
                self._actions.append(RollSegment(self._summary()))
                return
        if self._phase is Phase.CLOSING:
            if self._buffer:
                self._transmit_buffer(force=True)
                return
            self._actions.append(CloseSegment(self._summary()))
            self._phase = Phase.CLOSED

    def _fail(self, kind: FailureKind, reason: str) -> None:
        write_ids = [w for t in self._in_flight for w in t.write_ids if w >= 0]
        write_ids += range(self._next_write_id - len(self._buffer), self._next_write_id)
        self._in_flight.clear()
        self._buffer = []
        self._buffer_bytes = self._buffer_unpositioned = 0
        self._pending_writes = 0
        self._error = (kind, reason)
        self._phase = Phase.FAILED
        if write_ids:
            self._actions.append(FailWrites(tuple(write_ids), kind, reason))

    def failure(self) -> StreamError:
        """The error every write gets once the writer failed (by what failed)."""
        kind, reason = self._error or (FailureKind.CLOSED, "closed")
        where = f"stream {self.stream!r} segment {self._sequence}"
        if kind in (FailureKind.FENCED, FailureKind.OWNERSHIP):
            return OwnerFencedError(f"{where}: this writer lost the stream: {reason}")
        if kind is FailureKind.CLOSED:
            return WriterClosedError(f"{where}: {reason}")
        return WriteFailedError(f"{where}: {kind.value} failed: {reason}; reopen the writer")


def _entry_cut(records: Sequence[StoredRecord]) -> int:
    """How many of the records, from the first, fill one entry (at least one)."""
    total = 0
    for index, record in enumerate(records):
        total += len(record.payload)
        if total > ENTRY_RECORDS_BYTES_MAX:
            return max(1, index)
    return len(records)
