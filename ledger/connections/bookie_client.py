"""Typed requests to bookies by bookie id: the calls the writer, reader and recovery make.

Each call returns the decoded response when the bookie answered EOK, and otherwise raises
either the bookie's verdict (a `ledger.errors.BookieError`, from the one status table) or a
`ledger.errors` error (no verdict: unreachable, timed out, connection failed).
Both are `core.errors.GlobelogError`s with a code and a retriable flag.

After each request an optional observer learns (bookie id, operation, seconds, healthy), so the
placement health tracker can learn latencies without this package knowing it. `healthy` is
True when the bookie answered EOK or a definite non-retriable verdict about the data (no such
entry, fenced, ...), False for timeouts, connection failures and retriable statuses (EIO,
read-only, overloaded). A caller's own cancellation is not reported.
"""

from __future__ import annotations

import asyncio
import enum
import functools
import logging
import random
from collections.abc import Callable, Iterable
from types import TracebackType
from typing import TypeVar

from core import runtime
from core.errors import GlobelogError
from core.routes import PublishedTopology
from ledger.codecs.batch_codec import BOOKIE_BATCH_BYTES_MAX, BatchReadRequest, BatchReadResponse
from ledger.codecs.frames import AddFrames
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
from ledger.codes import LAST_ADD_CONFIRMED, BookieInfoFlag, OperationType, ReadFlag, StatusCode
from ledger.connections.bookie_pool import BookieClientConfig, BookiePool, BookieResolver
from ledger.connections.connection import BATCH_READ_WIRE, Clock, RequestFactory, WireResponse
from ledger.errors import BookieProtocolError, status_error

__all__ = ["BookieClient", "BookieClientConfig", "BookieResolver", "ClientOperation"]
log = logging.getLogger(__name__)

# BKPacketHeader.priority the Java client gives recovery adds and fencing reads
# (DEFAULT_HIGH_PRIORITY_VALUE): bookies serve them from their high-priority pool.
HIGH_PRIORITY = 100
# A long poll longer than this is a programming error; DistributedLog readers poll for 1 s.
LONG_POLL_TIMEOUT_MS_MAX = 60_000
ALL_BOOKIE_INFO = BookieInfoFlag.TOTAL_DISK_CAPACITY | BookieInfoFlag.FREE_DISK_SPACE
# `watch`: each bookie asked this often. A question left unanswered is evidence of silence
# while it is pending, and is given up after the time an add is (then its connection is
# closed as stalled): long enough to cover a take a few seconds into a cut, short enough
# that a question a cut dropped does not date a healed bookie's silence for long.
WATCH_EVERY_S = 0.5
WATCH_TIMEOUT_S = 5.0
WATCH_AGAIN_S = 1.0  # a question pending this long gets a second beside it; never a third
WATCH_QUESTIONS_MAX = 2
# A request pending this long is evidence of silence (`silent_since_s(at_least_s=...)`): more
# than a healthy round trip across the WAN (the realistic profile's longest is about 140 ms),
# so a question just sent to a healthy bookie is never taken for one.
SILENCE_EVIDENCE_S = 0.3


class ClientOperation(enum.StrEnum):
    """What a request was, as reported to the latency observer."""

    ADD_ENTRY = "add_entry"
    RECOVERY_ADD = "recovery_add"
    READ_ENTRY = "read_entry"
    BATCH_READ = "batch_read"  # its seconds grow with the entries it returns
    FENCING_READ = "fencing_read"
    READ_LAST_ENTRY = "read_last_entry"
    LONG_POLL = "read_lac_long_poll"  # its seconds include the wait for a new entry
    WRITE_LAC = "write_lac"
    READ_LAC = "read_lac"
    FORCE_LEDGER = "force_ledger"
    GET_BOOKIE_INFO = "get_bookie_info"
    PROBE = "probe"  # a bookie-info request asking for nothing: `watch`'s; teaches no latency


# (bookie id, operation, seconds, healthy) after each request; must not raise.
LatencyObserver = Callable[[str, str, float, bool], None]

R = TypeVar("R", bound=WireResponse)

EOK_ONLY = frozenset({StatusCode.EOK})
# ENOENTRY to a long poll still carries max_lac: "the LAC moved, the entry is elsewhere".
LONG_POLL_ANSWERS = frozenset({StatusCode.EOK, StatusCode.ENOENTRY})


class BookieClient:
    """Requests to any bookie by id over a pool of pipelined connections; `async with` it."""

    def __init__(
        self,
        resolve: BookieResolver,
        config: BookieClientConfig | None = None,
        observe: LatencyObserver | None = None,
        rng: random.Random | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.config = config if config is not None else BookieClientConfig()
        self._pool = BookiePool(resolve, self.config, rng, clock)
        # Batched reads speak BookKeeper's v2 protocol, which a connection cannot mix with v3.
        self._batch_pool = BookiePool(resolve, self.config, rng, clock, BATCH_READ_WIRE)
        self._observe = observe
        self._clock = clock if clock is not None else runtime.clock()
        self._pending: dict[str, int] = {}  # bookie id -> requests not yet finished
        # bookie id -> when the first request sent since its last answer went out (long polls,
        # which wait at the bookie by design, aside), while such requests are pending; and
        # how many of those are pending
        self._waiting_since: dict[str, float] = {}
        self._prompt_pending: dict[str, int] = {}
        self._probes_pending: dict[str, int] = {}  # of those, `watch`'s questions

    @classmethod
    def for_region(
        cls,
        topology: PublishedTopology,
        region: str,
        config: BookieClientConfig | None = None,
        observe: LatencyObserver | None = None,
    ) -> BookieClient:
        """A client in `region`: bookies of other regions are dialled through their WAN route."""
        assert region in topology.regions, (region, topology.regions)
        return cls(functools.partial(topology.address, region), config, observe)

    async def __aenter__(self) -> BookieClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Closes every connection; requests in flight fail with ClientClosedError."""
        await asyncio.gather(self._pool.close(), self._batch_pool.close())

    def pending_requests(self, bookie_id: str) -> int:
        """Requests to the bookie not yet answered: dialling, waiting for a slot, or in flight."""
        return self._pending.get(bookie_id, 0)

    def silent_since_s(self, bookie_id: str, at_least_s: float = 0.0) -> float | None:
        """When this client sent the bookie the first request it has not answered anything
        since (once dialled; long polls aside), while such requests are pending and that
        one for `at_least_s` or more; None if it answered since, or none is pending (that
        long). Evidence of a bookie behind a cut from every handle of this client: a new
        ledger's first adds or a recovery count its silence from then, not from their own
        first request (with `at_least_s=SILENCE_EVIDENCE_S`: not a request just sent)."""
        since = self._waiting_since.get(bookie_id)
        if since is None or self._clock() - since < at_least_s:
            return None
        return since

    def is_available(self, bookie_id: str) -> bool:
        """False while the bookie backs off after failures (its requests fail at once)."""
        return self._pool.is_available(bookie_id)

    @property
    def unknown_responses(self) -> int:
        """Responses dropped because their txn id was not in flight (late after a timeout)."""
        return self._pool.unknown_responses

    # --------------------------------------------------------------------------- entries

    async def add_entry(
        self,
        bookie_id: str,
        ledger_id: int,
        entry_id: int,
        master_key: bytes,
        body: bytes,
        recovery: bool = False,
    ) -> AddResponse:
        """Stores entry packet `body`; `recovery` re-adds past a fence (ledger recovery)."""
        make = _add_request(ledger_id, entry_id, master_key, body, recovery)
        operation = ClientOperation.RECOVERY_ADD if recovery else ClientOperation.ADD_ENTRY
        what = f"add ledger {ledger_id} entry {entry_id}"
        response = await self._call(bookie_id, operation, make, AddResponse, what)
        if (response.ledger_id, response.entry_id) != (ledger_id, entry_id):
            raise self._echo_error(bookie_id, what, response.ledger_id, response.entry_id)
        return response

    def add_entry_nowait(
        self,
        bookie_id: str,
        ledger_id: int,
        entry_id: int,
        frames: AddFrames,
        recovery: bool,
        done: Callable[[GlobelogError | None], None],
    ) -> bool:
        """Sends an add (`add_frames`' encoding) on an open connection with a free slot, with
        no task or coroutine.

        `done(None)` on success or `done(error)` later, with the errors `add_entry` raises.
        False (nothing sent) when that is not possible now: then use `add_entry`.
        """
        connection = self._pool.open_connection(bookie_id)
        if connection is None:
            return False
        operation = ClientOperation.RECOVERY_ADD if recovery else ClientOperation.ADD_ENTRY
        started_s = self._clock()

        def finished(response: WireResponse | None, error: GlobelogError | None) -> None:
            if response is not None:
                self._answered(self._pool, bookie_id)
                if not isinstance(response, AddResponse) or response.status is not StatusCode.EOK:
                    what = f"{connection.name}: add ledger {ledger_id} entry {entry_id}"
                    error = _verdict(response, what)
                elif response.entry_id != entry_id or response.ledger_id != ledger_id:
                    what = f"add ledger {ledger_id} entry {entry_id}"
                    error = self._echo_error(bookie_id, what, response.ledger_id, response.entry_id)
            healthy = error is None or not error.retriable
            self._finish(bookie_id, operation, self._clock() - started_s, healthy)
            done(error)

        if not connection.try_send_frame(OperationType.ADD_ENTRY, frames.pieces, finished):
            return False
        self._started(bookie_id)
        self._sent(bookie_id, operation, started_s)
        return True

    async def read_entry(
        self,
        bookie_id: str,
        ledger_id: int,
        entry_id: int,
        fence: bool = False,
        master_key: bytes | None = None,
    ) -> ReadResponse:
        """Entry `entry_id` (or, for -1, the bookie's last entry); `fence` fences the ledger
        first, which needs the master key."""
        assert not fence or master_key is not None, "a fencing read needs the master key"
        flag = ReadFlag.FENCE_LEDGER if fence else None
        priority = HIGH_PRIORITY if fence else 0

        def make(txn_id: int) -> ReadRequest:
            return ReadRequest(
                txn_id, ledger_id, entry_id, flag, master_key if fence else None, priority=priority
            )

        if fence:
            operation = ClientOperation.FENCING_READ
        elif entry_id == LAST_ADD_CONFIRMED:
            operation = ClientOperation.READ_LAST_ENTRY
        else:
            operation = ClientOperation.READ_ENTRY
        what = f"read ledger {ledger_id} entry {entry_id}" + (" (fencing)" if fence else "")
        response = await self._call(bookie_id, operation, make, ReadResponse, what)
        self._check_read_echo(bookie_id, what, response, ledger_id, entry_id)
        return response

    async def batch_read(
        self,
        bookie_id: str,
        ledger_id: int,
        first_entry_id: int,
        max_count: int,
        max_bytes: int = BOOKIE_BATCH_BYTES_MAX,
        timeout_s: float | None = None,
    ) -> tuple[bytes, ...]:
        """The entry packets of up to `max_count` consecutive entries from `first_entry_id`
        (BookKeeper 4.17's batched read, one request): at least one, and fewer where the
        bookie lacks the next entry or `max_bytes` of response would be passed.

        An error only when the bookie cannot read `first_entry_id` (NoSuchEntryError, ...).
        """
        assert max_count > 0 and max_bytes > 0, (max_count, max_bytes)
        max_bytes = min(max_bytes, self.config.connection.frame_bytes_max)

        def make(txn_id: int) -> BatchReadRequest:
            return BatchReadRequest(txn_id, ledger_id, first_entry_id, max_count, max_bytes)

        what = f"batch read ledger {ledger_id} entries {first_entry_id}+{max_count}"
        response = await self._call(
            bookie_id,
            ClientOperation.BATCH_READ,
            make,
            BatchReadResponse,
            what,
            timeout_s,
            pool=self._batch_pool,
        )
        echo = (response.ledger_id, response.first_entry_id)
        if echo != (ledger_id, first_entry_id):
            raise self._echo_error(bookie_id, what, *echo)
        if not response.entries or len(response.entries) > max_count:
            raise BookieProtocolError(
                f"bookie {bookie_id}: {what}: answered EOK with {len(response.entries)} "
                f"entries; expected 1..{max_count}"
            )
        return response.entries

    async def read_last_entry(
        self, bookie_id: str, ledger_id: int, fence: bool = False, master_key: bytes | None = None
    ) -> ReadResponse:
        """The bookie's last entry of the ledger (entry id -1), as readLastConfirmed reads it."""
        return await self.read_entry(bookie_id, ledger_id, LAST_ADD_CONFIRMED, fence, master_key)

    async def read_lac_long_poll(
        self, bookie_id: str, ledger_id: int, previous_lac: int, timeout_ms: int
    ) -> ReadResponse:
        """Waits up to `timeout_ms` at the bookie for its LAC to pass `previous_lac`.

        Returns the bookie's `max_lac`, with the body of entry previous_lac + 1 if the bookie
        has it. A poll that timed out at the bookie returns too: EOK, no body, `max_lac` the
        current LAC (seen on BookKeeper 4.17). ENOENTRY is also returned, not raised: the
        bookie's LAC moved but it holds no copy of that entry (striping). The client waits
        `long_poll_grace_s` beyond `timeout_ms` before it calls the bookie stuck.
        """
        assert 0 < timeout_ms <= LONG_POLL_TIMEOUT_MS_MAX, timeout_ms

        def make(txn_id: int) -> ReadRequest:
            return ReadRequest(
                txn_id,
                ledger_id,
                LAST_ADD_CONFIRMED,
                ReadFlag.ENTRY_PIGGYBACK,
                previous_lac=previous_lac,
                timeout_ms=timeout_ms,
            )

        timeout_s = timeout_ms / 1000 + self.config.long_poll_grace_s
        what = f"long-poll ledger {ledger_id} after LAC {previous_lac}"
        response = await self._call(
            bookie_id,
            ClientOperation.LONG_POLL,
            make,
            ReadResponse,
            what,
            timeout_s,
            accept=LONG_POLL_ANSWERS,
        )
        self._check_read_echo(bookie_id, what, response, ledger_id, LAST_ADD_CONFIRMED)
        return response

    # ------------------------------------------------------------------------ LAC, misc

    async def write_lac(
        self, bookie_id: str, ledger_id: int, lac: int, master_key: bytes, body: bytes
    ) -> WriteLacResponse:
        """Stores an explicit LAC; `body` is the LAC packet (`EntryCodec.encode_lac`)."""

        def make(txn_id: int) -> WriteLacRequest:
            return WriteLacRequest(txn_id, ledger_id, lac, master_key, body)

        what = f"write LAC {lac} of ledger {ledger_id}"
        response = await self._call(
            bookie_id, ClientOperation.WRITE_LAC, make, WriteLacResponse, what
        )
        if response.ledger_id != ledger_id:
            raise self._echo_error(bookie_id, what, response.ledger_id, None)
        return response

    async def read_lac(self, bookie_id: str, ledger_id: int) -> ReadLacResponse:
        """The bookie's explicit LAC packet and last entry packet of the ledger."""

        def make(txn_id: int) -> ReadLacRequest:
            return ReadLacRequest(txn_id, ledger_id)

        what = f"read LAC of ledger {ledger_id}"
        response = await self._call(
            bookie_id, ClientOperation.READ_LAC, make, ReadLacResponse, what
        )
        if response.ledger_id != ledger_id:
            raise self._echo_error(bookie_id, what, response.ledger_id, None)
        return response

    async def force_ledger(self, bookie_id: str, ledger_id: int) -> ForceLedgerResponse:
        """Fsyncs the ledger's DEFERRED_SYNC entries written so far on the bookie."""

        def make(txn_id: int) -> ForceLedgerRequest:
            return ForceLedgerRequest(txn_id, ledger_id)

        what = f"force ledger {ledger_id}"
        return await self._call(
            bookie_id, ClientOperation.FORCE_LEDGER, make, ForceLedgerResponse, what
        )

    async def get_bookie_info(
        self, bookie_id: str, requested: int = ALL_BOOKIE_INFO
    ) -> GetBookieInfoResponse:
        """The bookie's disk figures named by `requested` (BookieInfoFlag bits)."""

        def make(txn_id: int) -> GetBookieInfoRequest:
            return GetBookieInfoRequest(txn_id, requested)

        what = "get bookie info"
        return await self._call(
            bookie_id, ClientOperation.GET_BOOKIE_INFO, make, GetBookieInfoResponse, what
        )

    async def watch(
        self,
        bookies: Callable[[], Iterable[str]],
        every_s: float = WATCH_EVERY_S,
        timeout_s: float = WATCH_TIMEOUT_S,
    ) -> None:
        """Until cancelled: every `every_s`, each of `bookies()` with no question of this
        watch pending is asked one (a bookie-info request asking for nothing, which a bookie
        answers at once, off its journal). A bookie behind a cut then has a request pending
        that it does not answer, so `silent_since_s` dates its silence from at most `every_s`
        after the cut even for a client that had sent it nothing: a recovery's or a new
        ledger's quorum lag counts from then. A question pending for WATCH_AGAIN_S gets one
        more beside it: a cut that dropped the first (an emulated one does) then ends, once
        healed, with the second's answer, not with the first's timeout. The answers are no
        latency (`ClientOperation.PROBE`); a failure is left to the pool's backoff."""
        assert every_s > 0 and timeout_s > 0, (every_s, timeout_s)
        asking: dict[str, list[float]] = {}  # bookie -> when each pending question was sent
        tasks: set[asyncio.Task[None]] = set()

        def make(txn_id: int) -> GetBookieInfoRequest:
            return GetBookieInfoRequest(txn_id, 0)

        async def ask(bookie_id: str, sent_s: float) -> None:
            try:
                await self._call(
                    bookie_id,
                    ClientOperation.PROBE,
                    make,
                    GetBookieInfoResponse,
                    "probe",
                    timeout_s,
                )
            except GlobelogError:
                pass  # unreachable or failed: the next turn asks again (after any backoff)
            except Exception:  # a bug here must not die unseen (I8)
                log.exception("a probe of bookie %s failed", bookie_id)
            finally:
                pending = asking[bookie_id]
                pending.remove(sent_s)
                if not pending:
                    del asking[bookie_id]

        try:
            while True:
                now_s = self._clock()
                for bookie_id in bookies():
                    pending = asking.get(bookie_id, [])
                    if len(pending) >= WATCH_QUESTIONS_MAX or (
                        pending and now_s - pending[-1] < WATCH_AGAIN_S
                    ):
                        continue
                    asking.setdefault(bookie_id, []).append(now_s)
                    task = asyncio.create_task(ask(bookie_id, now_s))
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)
                await asyncio.sleep(every_s)
        finally:
            waiting = list(tasks)
            for task in waiting:
                task.cancel()
            await asyncio.gather(*waiting, return_exceptions=True)

    # ---------------------------------------------------------------------------- driver

    async def _call(
        self,
        bookie_id: str,
        operation: ClientOperation,
        make: RequestFactory,
        expected: type[R],
        what: str,
        timeout_s: float | None = None,
        accept: frozenset[StatusCode] = EOK_ONLY,
        pool: BookiePool | None = None,
    ) -> R:
        """Sends one request; returns its response if its status is in `accept`, else raises."""
        pool = self._pool if pool is None else pool
        started_s = self._clock()
        self._started(bookie_id)
        sent = False
        healthy: bool | None = False  # None: the caller gave up, nothing learnt of the bookie
        try:
            connection = await pool.connection(bookie_id)
            # dialled (a far bookie's connect and handshake are no silence of its own): its
            # silence counts from here
            self._sent(bookie_id, operation, self._clock())
            sent = True
            response = await connection.call(make, timeout_s)
            self._answered(pool, bookie_id, operation)
            if isinstance(response, expected) and response.status in accept:
                healthy = True
                return response
            error = _verdict(response, f"{connection.name}: {what}")
            healthy = not error.retriable
            raise error
        except asyncio.CancelledError:
            healthy = None
            raise
        finally:
            self._finish(bookie_id, operation, self._clock() - started_s, healthy, sent)

    def _started(self, bookie_id: str) -> None:
        self._pending[bookie_id] = self._pending.get(bookie_id, 0) + 1

    def _sent(self, bookie_id: str, operation: ClientOperation, now_s: float) -> None:
        if operation is not ClientOperation.LONG_POLL:
            self._prompt_pending[bookie_id] = self._prompt_pending.get(bookie_id, 0) + 1
            self._waiting_since.setdefault(bookie_id, now_s)
        if operation is ClientOperation.PROBE:
            self._probes_pending[bookie_id] = self._probes_pending.get(bookie_id, 0) + 1

    def _answered(
        self, pool: BookiePool, bookie_id: str, operation: ClientOperation | None = None
    ) -> None:
        pool.answered(bookie_id)
        others = self._prompt_pending.get(bookie_id, 0) - self._probes_pending.get(bookie_id, 0)
        if operation is ClientOperation.PROBE and others > 0:
            # a bookie whose journal stalls still answers probes (off its journal): that
            # answer leaves the silence other requests date
            return
        self._waiting_since.pop(bookie_id, None)

    def _finish(
        self,
        bookie_id: str,
        operation: ClientOperation,
        seconds: float,
        healthy: bool | None,
        sent: bool = True,
    ) -> None:
        count = self._pending[bookie_id] - 1
        if count:
            self._pending[bookie_id] = count
        else:
            del self._pending[bookie_id]
        if sent and operation is ClientOperation.PROBE:
            probes = self._probes_pending[bookie_id] - 1
            if probes:
                self._probes_pending[bookie_id] = probes
            else:
                del self._probes_pending[bookie_id]
        if sent and operation is not ClientOperation.LONG_POLL:
            prompt = self._prompt_pending[bookie_id] - 1
            if prompt:
                self._prompt_pending[bookie_id] = prompt
            else:  # nothing pending it could have answered: nothing known
                del self._prompt_pending[bookie_id]
                self._waiting_since.pop(bookie_id, None)
        if self._observe is not None and healthy is not None:
            self._observe(bookie_id, operation, seconds, healthy)

    def _check_read_echo(
        self, bookie_id: str, what: str, response: ReadResponse, ledger_id: int, entry_id: int
    ) -> None:
        # A read of entry -1 is answered with the id of the entry found; only check real ids.
        echoed_entry = None if entry_id == LAST_ADD_CONFIRMED else response.entry_id
        if response.ledger_id != ledger_id or echoed_entry not in (None, entry_id):
            raise self._echo_error(bookie_id, what, response.ledger_id, response.entry_id)

    @staticmethod
    def _echo_error(
        bookie_id: str, what: str, ledger_id: int, entry_id: int | None
    ) -> BookieProtocolError:
        entry = "" if entry_id is None else f" entry {entry_id}"
        return BookieProtocolError(
            f"bookie {bookie_id}: {what}: answered for ledger {ledger_id}{entry}"
        )


def add_frames(
    ledger_id: int, entry_id: int, master_key: bytes, body: bytes, recovery: bool
) -> AddFrames:
    """An entry's add, encoded once for every bookie of its write quorum (`add_entry_nowait`)."""
    return AddFrames(_add_request(ledger_id, entry_id, master_key, body, recovery)(0))


def _add_request(
    ledger_id: int, entry_id: int, master_key: bytes, body: bytes, recovery: bool
) -> Callable[[int], AddRequest]:
    """The AddRequest factory for a txn id; recovery adds go at high priority, as in Java."""
    priority = HIGH_PRIORITY if recovery else 0

    def make(txn_id: int) -> AddRequest:
        return AddRequest(txn_id, ledger_id, entry_id, master_key, body, recovery, None, priority)

    return make


def _verdict(response: WireResponse, where: str) -> GlobelogError:
    """The error for a response that is not an accepted answer."""
    error = status_error(response.status, where)
    if error is not None:
        return error
    return BookieProtocolError(f"{where}: EOK answer of unexpected type {type(response).__name__}")
