"""A simulated bookie that speaks BookKeeper's wire protocol over simulated TCP.

globelog's real bookie client (connections, pools, codecs, timeouts) talks to it as to a real
bookie: v3 protobuf requests (adds, reads, fencing reads, last-entry reads, LAC long polls,
explicit LACs, bookie info) and, on a connection whose first frame is v2, batched reads. What
it keeps and how it decides is `SimBookie`'s (held to a real bookie by the contract tests);
this module only frames, decodes, answers and holds long polls.

Not simulated: TLS, authentication, master-key checks (every client of a simulation has the
deployment's password), DEFERRED_SYNC.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Callable
from dataclasses import dataclass

from ledger.codecs.batch_codec import (
    BatchReadRequest,
    BatchReadResponse,
    decode_batch_read_request,
    encode_batch_read_response,
)
from ledger.codecs.frames import Deframer, RequestFrameDecoder, encode_response
from ledger.codecs.messages import (
    AddRequest,
    AddResponse,
    ForceLedgerRequest,
    ForceLedgerResponse,
    GetBookieInfoRequest,
    GetBookieInfoResponse,
    ReadLacRequest,
    ReadLacResponse,
    ReadRequest,
    ReadResponse,
    WriteLacRequest,
    WriteLacResponse,
)
from ledger.codes import LAST_ADD_CONFIRMED, ReadFlag, StatusCode
from ledger.errors import ProtocolError
from ledger.machines.signals import BookieFailure
from verify.sim.bookie import SimBookie, StoredEntry
from verify.sim.io.loop import Host, SimLoop
from verify.sim.io.network import Network

BOOKIE_PORT = 3181
DISK_BYTES = 1 << 40
_ENTRY_HEADER = struct.Struct(">qqqq")  # ledger id, entry id, LAC, length (entry packets)
_V3_FIRST_BYTE = 0x0A  # a Request message starts with field 1 (its header), length-delimited

_STATUS = {
    BookieFailure.FENCED: StatusCode.EFENCED,
    BookieFailure.READ_ONLY: StatusCode.EREADONLY,
    BookieFailure.NO_SUCH_LEDGER: StatusCode.ENOLEDGER,
    BookieFailure.NO_SUCH_ENTRY: StatusCode.ENOENTRY,
    BookieFailure.UNAUTHORIZED: StatusCode.EUA,
}


@dataclass(slots=True)
class _Poll:
    previous_lac: int
    answer: Callable[[], None]
    timer: asyncio.TimerHandle


class BookieServer:
    """The bookie process of simulated host `host`; its storage (`bookie`) outlives crashes
    (the journal is synced before an add is answered) unless the disk is wiped."""

    def __init__(self, loop: SimLoop, network: Network, host: Host, bookie: SimBookie) -> None:
        self.loop = loop
        self.network = network
        self.host = host
        self.bookie = bookie
        self._polls: dict[int, list[_Poll]] = {}

    @property
    def address(self) -> str:
        return f"{self.host.ip}:{BOOKIE_PORT}"

    def start(self) -> None:
        """Listens (at first start, and after each restart)."""
        self._polls.clear()  # held for connections of a process that is gone
        self.network.listen(self.host, BOOKIE_PORT, lambda: _BookieConnection(self))

    def wipe(self) -> None:
        """The disk is lost: a new, empty bookie under the same name."""
        self.bookie = SimBookie(self.bookie.name)

    # -- v3 requests ---------------------------------------------------------------------------

    def add(self, request: AddRequest) -> AddResponse:
        _, _, lac, length = _ENTRY_HEADER.unpack_from(request.body)
        stored = StoredEntry(lac, length, request.body)
        before = self.bookie.lac(request.ledger_id)
        failure = self.bookie.add(
            request.ledger_id, request.entry_id, stored, recovery=request.recovery
        )
        if failure is None:
            self._lac_moved(request.ledger_id, before)
        return AddResponse(request.txn_id, _status(failure), request.ledger_id, request.entry_id)

    def read(self, request: ReadRequest, reply: Callable[[ReadResponse], None]) -> None:
        ledger_id, entry_id = request.ledger_id, request.entry_id
        fence = request.flag is not None and bool(request.flag & ReadFlag.FENCE_LEDGER)
        if request.previous_lac is not None and entry_id == LAST_ADD_CONFIRMED:
            self._long_poll(request, reply)
            return
        if fence and not self.bookie.is_fenced(ledger_id):
            self.loop.call_soon(self._fenced, ledger_id)  # once this read is answered
        if entry_id == LAST_ADD_CONFIRMED:
            last = self.bookie.read_last(ledger_id, fence=fence)
            if isinstance(last, BookieFailure):
                reply(ReadResponse(request.txn_id, _status(last), ledger_id, entry_id))
            else:
                found_id, stored = last
                reply(
                    ReadResponse(request.txn_id, StatusCode.EOK, ledger_id, found_id, stored.body)
                )
            return
        found = self.bookie.read(ledger_id, entry_id, fence=fence)
        if isinstance(found, BookieFailure):
            reply(ReadResponse(request.txn_id, _status(found), ledger_id, entry_id))
        else:
            reply(ReadResponse(request.txn_id, StatusCode.EOK, ledger_id, entry_id, found.body))

    def write_lac(self, request: WriteLacRequest) -> WriteLacResponse:
        before = self.bookie.lac(request.ledger_id)
        failure = self.bookie.write_lac(request.ledger_id, request.lac, request.body)
        if failure is None:
            self._lac_moved(request.ledger_id, before)
        return WriteLacResponse(request.txn_id, _status(failure), request.ledger_id)

    def read_lac(self, request: ReadLacRequest) -> ReadLacResponse:
        ledger_id = request.ledger_id
        last = self.bookie.read_last(ledger_id)
        explicit = self.bookie.explicit_lac(ledger_id)
        if isinstance(last, BookieFailure) and explicit is None:
            return ReadLacResponse(request.txn_id, _status(last), ledger_id)
        last_body = None if isinstance(last, BookieFailure) else last[1].body
        return ReadLacResponse(request.txn_id, StatusCode.EOK, ledger_id, explicit, last_body)

    # -- long polls ------------------------------------------------------------------------------

    def _long_poll(self, request: ReadRequest, reply: Callable[[ReadResponse], None]) -> None:
        """Answers once the bookie's LAC passes `previous_lac`, with entry previous_lac + 1
        piggybacked if held (EOK with the LAC alone if not), or at the timeout: EOK, no body."""
        ledger_id, previous = request.ledger_id, request.previous_lac
        assert previous is not None

        def answer() -> None:
            lac = self.bookie.lac(ledger_id)
            if lac is None:
                reply(ReadResponse(request.txn_id, StatusCode.ENOLEDGER, ledger_id, -1))
                return
            if lac <= previous:  # timed out at the bookie
                reply(ReadResponse(request.txn_id, StatusCode.EOK, ledger_id, -1, max_lac=lac))
                return
            found = self.bookie.holds(ledger_id, previous + 1)
            if found is None:  # a 4.17 bookie answers the LAC alone (the contract's case)
                reply(ReadResponse(request.txn_id, StatusCode.EOK, ledger_id, -1, max_lac=lac))
            else:
                reply(
                    ReadResponse(
                        request.txn_id, StatusCode.EOK, ledger_id, previous + 1, found.body, lac
                    )
                )

        lac = self.bookie.lac(ledger_id)
        if lac is None or lac > previous or not request.timeout_ms:
            answer()
            return
        polls = self._polls.setdefault(ledger_id, [])

        def timed_out() -> None:
            polls[:] = [p for p in polls if p is not poll]
            answer()

        timer = self.loop.call_later(request.timeout_ms / 1000, timed_out)
        poll = _Poll(previous, answer, timer)
        polls.append(poll)

    def _lac_moved(self, ledger_id: int, before: int | None) -> None:
        """After an add or an explicit LAC: if the LAC moved, every poll waiting on the ledger
        is woken once, as a 4.17 bookie wakes them (a one-shot notification). Those the move
        passes are answered; the others are no longer woken and answer at their timeout,
        however far the LAC moves meanwhile (the contract's case)."""
        polls = self._polls.get(ledger_id)
        lac = self.bookie.lac(ledger_id)
        assert lac is not None
        if not polls or (before is not None and lac <= before):
            return
        del self._polls[ledger_id]
        for poll in polls:
            if poll.previous_lac < lac:
                poll.timer.cancel()
                poll.answer()

    def _fenced(self, ledger_id: int) -> None:
        """A ledger just fenced wakes every poll waiting on it, as a 4.17 bookie does: each
        answers with the LAC as it stands (the LAC alone if that does not pass it)."""
        polls = self._polls.pop(ledger_id, [])
        for poll in polls:
            poll.timer.cancel()
            poll.answer()

    # -- v2 batched reads -----------------------------------------------------------------------

    def batch_read(self, request: BatchReadRequest) -> BatchReadResponse:
        """Consecutive entries from the first, stopping at the first one missing or when the
        frame would pass `max_size` (the first is always sent)."""
        first = self.bookie.read(request.ledger_id, request.first_entry_id)
        if isinstance(first, BookieFailure):
            return BatchReadResponse(
                request.txn_id, _status(first), request.ledger_id, request.first_entry_id, ()
            )
        entries = [first.body]
        size = 32 + 4 + len(first.body)
        entry_id = request.first_entry_id + 1
        while len(entries) < request.max_count:
            found = self.bookie.holds(request.ledger_id, entry_id)
            if found is None or size + 4 + len(found.body) > request.max_size:
                break
            entries.append(found.body)
            size += 4 + len(found.body)
            entry_id += 1
        return BatchReadResponse(
            request.txn_id,
            StatusCode.EOK,
            request.ledger_id,
            request.first_entry_id,
            tuple(entries),
        )


class _BookieConnection(asyncio.Protocol):
    """One client connection: v3 or v2 (batched reads), as its first frame says."""

    def __init__(self, server: BookieServer) -> None:
        self._server = server
        self._transport: asyncio.Transport | None = None
        self._v3: RequestFrameDecoder | None = None
        self._v2: Deframer[BatchReadRequest] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport

    def data_received(self, data: bytes) -> None:
        if self._v3 is None and self._v2 is None:
            if len(data) > 4 and data[4] == _V3_FIRST_BYTE:
                self._v3 = RequestFrameDecoder()
            else:
                self._v2 = Deframer(decode_batch_read_request, "batch read requests", 1 << 20)
        try:
            if self._v3 is not None:
                for request in self._v3.feed(data):
                    self._serve(request)
            else:
                assert self._v2 is not None
                for batch in self._v2.feed(data):
                    self._send(encode_batch_read_response(self._server.batch_read(batch)))
        except ProtocolError:
            if self._transport is not None:
                self._transport.abort()

    def _serve(self, request: object) -> None:
        server = self._server
        match request:
            case AddRequest():
                self._reply(server.add(request))
            case ReadRequest():
                server.read(request, self._reply)
            case WriteLacRequest():
                self._reply(server.write_lac(request))
            case ReadLacRequest():
                self._reply(server.read_lac(request))
            case GetBookieInfoRequest():
                self._reply(
                    GetBookieInfoResponse(request.txn_id, StatusCode.EOK, DISK_BYTES, DISK_BYTES)
                )
            case ForceLedgerRequest():
                self._reply(ForceLedgerResponse(request.txn_id, StatusCode.EOK, request.ledger_id))
            case _:
                if self._transport is not None:
                    self._transport.abort()

    def _reply(self, response: object) -> None:
        self._send(encode_response(response))  # type: ignore[arg-type]

    def _send(self, frame: bytes) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.write(frame)

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None


def _status(failure: BookieFailure | None) -> StatusCode:
    return StatusCode.EOK if failure is None else _STATUS.get(failure, StatusCode.EIO)
