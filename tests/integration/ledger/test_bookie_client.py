"""BookieClient against the real bookies of the local cluster, and against lying fake bookies.

Each test writes to a fresh random ledger id, so tests never see each other's entries.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

import pytest

from core.routes import publish_topology
from core.topology import Bookie
from ledger.codecs.entry import DigestType, EntryCodec, master_key
from ledger.codecs.frames import RequestFrameDecoder, encode_response
from ledger.codecs.messages import GetBookieInfoResponse, Request
from ledger.codes import StatusCode
from ledger.connections.backoff import BackoffPolicy
from ledger.connections.bookie_client import BookieClient, BookieClientConfig
from ledger.connections.connection import ConnectionConfig
from ledger.errors import (
    BookieConnectionError,
    BookieProtocolError,
    BookieTimeoutError,
    BookieUnavailableError,
    ClientClosedError,
    FencedError,
    NoSuchEntryError,
    NoSuchLedgerError,
    ProtocolError,
    UnauthorizedError,
)
from localcluster import controller
from localcluster.controller import Cluster
from localcluster.tools import Tools
from tests.support import security
from tests.support.topologies import free_ports

PASSWORD = b"globelog-test"
KEY = master_key(PASSWORD)
GUARD_S = 15.0  # no test step may hang: every await on the network is bounded by this
PIPELINED_ADDS = 500

Observation = tuple[str, str, float, bool]
T = TypeVar("T")


class Ledger:
    """A fresh ledger id and its codec; adds entries to a bookie, tracking LAC and length."""

    def __init__(self) -> None:
        self.ledger_id = random.randrange(1 << 40)
        self.codec = EntryCodec(self.ledger_id, DigestType.CRC32C, PASSWORD)
        self.length = 0

    def packet(self, entry_id: int, lac: int, payload: bytes) -> bytes:
        self.length += len(payload)
        return self.codec.encode_entry(entry_id, lac, self.length, payload)


def local_client(
    cluster: Cluster,
    bookie: Bookie,
    observed: list[Observation] | None = None,
    config: BookieClientConfig | None = None,
) -> BookieClient:
    """A client in the bookie's own region (it dials the bookie directly)."""
    observe = None if observed is None else (lambda *o: observed.append(o))
    published = publish_topology(cluster.topology)
    config = config if config is not None else security.bookie_config()
    return BookieClient.for_region(published, bookie.region, config, observe)


async def guarded(step: Awaitable[T]) -> T:
    return await asyncio.wait_for(step, GUARD_S)


async def test_entries_read_back_byte_for_byte(cluster: Cluster) -> None:
    bookie = cluster.topology.bookies[1].bookie_id
    ledger = Ledger()
    payloads = [b"", b"first", bytes(range(256)) * 256, random.randbytes(100_000)]
    async with local_client(cluster, cluster.topology.bookies[1]) as client:
        packets = []
        for entry_id, payload in enumerate(payloads):
            packets.append(ledger.packet(entry_id, entry_id - 1, payload))
            added = await guarded(
                client.add_entry(bookie, ledger.ledger_id, entry_id, KEY, packets[-1])
            )
            assert (added.ledger_id, added.entry_id) == (ledger.ledger_id, entry_id)
        for entry_id, payload in enumerate(payloads):
            read = await guarded(client.read_entry(bookie, ledger.ledger_id, entry_id))
            assert read.body == packets[entry_id]
            assert ledger.codec.decode_entry(read.body, entry_id).payload == payload
        last = await guarded(client.read_last_entry(bookie, ledger.ledger_id))
        assert last.body is not None
        assert ledger.codec.decode_last_entry(last.body).entry_id == len(payloads) - 1

        await guarded(
            client.write_lac(bookie, ledger.ledger_id, 3, KEY, ledger.codec.encode_lac(3))
        )
        lac = await guarded(client.read_lac(bookie, ledger.ledger_id))
        assert lac.lac_body is not None and ledger.codec.decode_lac(lac.lac_body) == 3
        assert lac.last_entry_body == packets[-1]
        info = await guarded(client.get_bookie_info(bookie))
        assert info.free_disk_space is not None and info.free_disk_space > 0


async def test_a_batched_read_returns_consecutive_entries_as_stored(cluster: Cluster) -> None:
    target = cluster.topology.bookies[1]
    bookie, ledger = target.bookie_id, Ledger()
    payloads = [random.randbytes(random.randrange(0, 3000)) for _ in range(40)]
    async with local_client(cluster, target) as client:
        packets = [ledger.packet(e, e - 1, p) for e, p in enumerate(payloads)]
        for entry_id, packet in enumerate(packets):
            await guarded(client.add_entry(bookie, ledger.ledger_id, entry_id, KEY, packet))
        # on the same client's v3 connection too: the batch goes on a v2 connection of its own
        read = await guarded(client.read_entry(bookie, ledger.ledger_id, 3))
        assert read.body == packets[3]
        whole = await guarded(client.batch_read(bookie, ledger.ledger_id, 0, 100))
        assert list(whole) == packets  # stops at the last entry the bookie has
        middle = await guarded(client.batch_read(bookie, ledger.ledger_id, 10, 5))
        assert list(middle) == packets[10:15]
        # the size bound counts the frame: header 36 bytes, then 4 + length per entry
        fits_two = 36 + sum(4 + len(p) for p in packets[20:22])
        bounded = await guarded(client.batch_read(bookie, ledger.ledger_id, 20, 10, fits_two))
        assert list(bounded) == packets[20:22]
        # the first entry always comes, even past the bound
        one = await guarded(client.batch_read(bookie, ledger.ledger_id, 30, 10, 1))
        assert list(one) == packets[30:31]
        with pytest.raises(NoSuchEntryError, match=f"bookie {bookie}: batch read ledger"):
            await guarded(client.batch_read(bookie, ledger.ledger_id, 40, 10))
        with pytest.raises(NoSuchLedgerError):
            await guarded(client.batch_read(bookie, ledger.ledger_id + 1, 0, 10))
        # the v3 connection still serves after the batches
        read = await guarded(client.read_entry(bookie, ledger.ledger_id, 39))
        assert read.body == packets[39]


async def test_many_batched_reads_in_flight_each_get_their_own_answer(cluster: Cluster) -> None:
    target = cluster.topology.bookies[2]
    bookie, ledger = target.bookie_id, Ledger()
    async with local_client(cluster, target) as client:
        packets = [ledger.packet(e, e - 1, f"entry {e}".encode() * 20) for e in range(200)]
        await guarded(
            asyncio.gather(
                *(
                    client.add_entry(bookie, ledger.ledger_id, e, KEY, p)
                    for e, p in enumerate(packets)
                )
            )
        )
        starts = list(range(0, 200, 7))
        batches = await guarded(
            asyncio.gather(*(client.batch_read(bookie, ledger.ledger_id, s, 7) for s in starts))
        )
        for start, batch in zip(starts, batches, strict=True):
            assert list(batch) == packets[start : start + 7]


async def test_hundreds_of_pipelined_adds_all_ack(cluster: Cluster) -> None:
    target = cluster.topology.bookies[0]
    bookie, ledger = target.bookie_id, Ledger()
    observed: list[Observation] = []
    packets = [ledger.packet(e, e - 1, f"record {e}".encode()) for e in range(PIPELINED_ADDS)]
    async with local_client(cluster, target, observed) as client:
        adds = [
            asyncio.create_task(client.add_entry(bookie, ledger.ledger_id, e, KEY, packets[e]))
            for e in range(PIPELINED_ADDS)
        ]
        await asyncio.sleep(0)
        assert client.pending_requests(bookie) == PIPELINED_ADDS  # all issued before any ack
        acked = await guarded(asyncio.gather(*adds))
        assert sorted(a.entry_id for a in acked) == list(range(PIPELINED_ADDS))
        assert client.pending_requests(bookie) == 0
        assert len(observed) == PIPELINED_ADDS
        assert {(b, op, ok) for b, op, _, ok in observed} == {(bookie, "add_entry", True)}
        for entry_id in (0, PIPELINED_ADDS // 2, PIPELINED_ADDS - 1):
            read = await guarded(client.read_entry(bookie, ledger.ledger_id, entry_id))
            assert read.body == packets[entry_id]


async def test_missing_entries_and_ledgers_are_definite_answers(cluster: Cluster) -> None:
    target = cluster.topology.bookies[2]
    bookie, ledger = target.bookie_id, Ledger()
    observed: list[Observation] = []
    async with local_client(cluster, target, observed) as client:
        await guarded(
            client.add_entry(bookie, ledger.ledger_id, 0, KEY, ledger.packet(0, -1, b"x"))
        )
        with pytest.raises(NoSuchEntryError, match=f"bookie {bookie}: read ledger .* entry 7"):
            await guarded(client.read_entry(bookie, ledger.ledger_id, 7))
        with pytest.raises(NoSuchLedgerError) as caught:
            await guarded(client.read_entry(bookie, ledger.ledger_id + 1, 0))
        assert not caught.value.retriable and caught.value.code == "bookie_no_such_ledger"
    # A missing entry says nothing bad about the bookie's health.
    assert [ok for _, _, _, ok in observed] == [True, True, True]


async def test_fencing_stops_normal_adds_but_not_recovery_adds(cluster: Cluster) -> None:
    target = cluster.topology.bookies[3]
    bookie, ledger = target.bookie_id, Ledger()
    async with local_client(cluster, target) as client:
        for e in range(2):
            await guarded(
                client.add_entry(bookie, ledger.ledger_id, e, KEY, ledger.packet(e, e - 1, b"x"))
            )
        fenced = await guarded(
            client.read_last_entry(bookie, ledger.ledger_id, fence=True, master_key=KEY)
        )
        assert fenced.body is not None and ledger.codec.decode_last_entry(fenced.body).entry_id == 1
        packet = ledger.packet(2, 1, b"after the fence")
        with pytest.raises(FencedError):
            await guarded(client.add_entry(bookie, ledger.ledger_id, 2, KEY, packet))
        recovered = await guarded(
            client.add_entry(bookie, ledger.ledger_id, 2, KEY, packet, recovery=True)
        )
        assert recovered.status is StatusCode.EOK
        read = await guarded(client.read_entry(bookie, ledger.ledger_id, 2))
        assert read.body == packet


async def test_a_wrong_master_key_is_unauthorized(cluster: Cluster) -> None:
    target = cluster.topology.bookies[4]
    bookie, ledger = target.bookie_id, Ledger()
    async with local_client(cluster, target) as client:
        await guarded(
            client.add_entry(bookie, ledger.ledger_id, 0, KEY, ledger.packet(0, -1, b"x"))
        )
        wrong = master_key(b"not the password")
        with pytest.raises(UnauthorizedError, match="EUA"):
            await guarded(
                client.add_entry(bookie, ledger.ledger_id, 1, wrong, ledger.packet(1, 0, b"y"))
            )
        with pytest.raises(UnauthorizedError):
            await guarded(
                client.read_last_entry(bookie, ledger.ledger_id, fence=True, master_key=wrong)
            )


async def test_a_long_poll_returns_when_a_later_entry_raises_the_lac(cluster: Cluster) -> None:
    target = cluster.topology.bookies[5]
    bookie, ledger = target.bookie_id, Ledger()
    async with local_client(cluster, target) as client:
        packets = [ledger.packet(e, e - 1, f"entry {e}".encode()) for e in range(3)]
        for e in range(2):  # entry 1 carries LAC 0: the bookie's LAC is 0
            await guarded(client.add_entry(bookie, ledger.ledger_id, e, KEY, packets[e]))
        started = time.monotonic()
        poll = asyncio.create_task(client.read_lac_long_poll(bookie, ledger.ledger_id, 0, 5000))
        await asyncio.sleep(0.3)
        assert not poll.done()
        await guarded(client.add_entry(bookie, ledger.ledger_id, 2, KEY, packets[2]))  # LAC 1
        answer = await guarded(poll)
        assert 0.3 <= time.monotonic() - started < 3.0
        assert answer.status is StatusCode.EOK and answer.max_lac == 1
        assert answer.body == packets[1]  # the entry after the previous LAC rides along


async def test_a_long_poll_times_out_with_the_current_lac(cluster: Cluster) -> None:
    target = cluster.topology.bookies[5]
    bookie, ledger = target.bookie_id, Ledger()
    async with local_client(cluster, target) as client:
        for e in range(3):
            packet = ledger.packet(e, e - 1, b"x")
            await guarded(client.add_entry(bookie, ledger.ledger_id, e, KEY, packet))
        started = time.monotonic()
        answer = await guarded(client.read_lac_long_poll(bookie, ledger.ledger_id, 1, 500))
        assert 0.45 <= time.monotonic() - started < 2.5
        assert answer.max_lac == 1 and answer.body is None
        with pytest.raises(NoSuchLedgerError):
            await guarded(client.read_lac_long_poll(bookie, ledger.ledger_id + 1, 0, 500))


async def best_round_trip_s(client: BookieClient, bookie: str, samples: int = 5) -> float:
    await guarded(client.get_bookie_info(bookie))  # dial and warm up
    times = []
    for _ in range(samples):
        started = time.perf_counter()
        await guarded(client.get_bookie_info(bookie))
        times.append(time.perf_counter() - started)
    return min(times)


async def test_a_remote_bookie_is_reached_through_its_wan_route(cluster: Cluster) -> None:
    topology = cluster.topology
    target = next(b for b in topology.bookies if b.region == "eu-west")
    published = publish_topology(topology)
    assert published.address("us-east", target.bookie_id) != target.bookie_id
    link = topology.wan.link("ci", "us-east", "eu-west")
    floor_s = 2 * (link.one_way_ms - link.jitter_ms) / 1000
    ledger = Ledger()
    observed: list[Observation] = []
    far = BookieClient.for_region(
        published, "us-east", security.bookie_config(), observe=lambda *o: observed.append(o)
    )
    async with far, BookieClient.for_region(published, "eu-west", security.bookie_config()) as near:
        # physics: the route's emulated latency each way; a near round trip is not bounded
        # by anything but load (TLS and two busy cores made it 8 ms once)
        assert await best_round_trip_s(far, target.bookie_id) >= floor_s
        packet = ledger.packet(0, -1, b"across the ocean")
        await guarded(far.add_entry(target.bookie_id, ledger.ledger_id, 0, KEY, packet))
        read = await guarded(near.read_entry(target.bookie_id, ledger.ledger_id, 0))
        assert read.body == packet
    assert all(seconds >= floor_s for _, _, seconds, _ in observed)


async def test_a_paused_bookie_times_out_then_fails_fast_until_resumed(
    cluster: Cluster, tools: Tools
) -> None:
    target = cluster.topology.bookies[3]
    bookie, ledger = target.bookie_id, Ledger()
    config = dataclasses.replace(
        security.bookie_config(request_timeout_s=1.0),
        backoff=BackoffPolicy(base_s=0.5, cap_s=1.0),
    )
    async with local_client(cluster, target, config=config) as client:
        await guarded(client.get_bookie_info(bookie))
        await controller.fault(cluster, tools, "pause", target.name)
        try:
            started = time.monotonic()
            with pytest.raises(BookieTimeoutError, match=f"bookie {bookie}: ADD_ENTRY") as caught:
                packet = ledger.packet(0, -1, b"x")
                await guarded(client.add_entry(bookie, ledger.ledger_id, 0, KEY, packet))
            assert caught.value.retriable and 0.9 <= time.monotonic() - started < 3.0
            started = time.monotonic()
            with pytest.raises(BookieUnavailableError, match="after 1 consecutive failure"):
                await guarded(client.get_bookie_info(bookie))
            # refused from the backoff, not after waiting out another request timeout (1 s)
            assert time.monotonic() - started < 0.5 and not client.is_available(bookie)
        finally:
            await controller.fault(cluster, tools, "resume", target.name)
        info = await eventually(lambda: client.get_bookie_info(bookie))
        assert info.status is StatusCode.EOK and client.is_available(bookie)


async def eventually(attempt: Callable[[], Awaitable[T]], within_s: float = GUARD_S) -> T:
    """The first success of `attempt`, retrying retriable connection errors."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            return await guarded(attempt())
        except BookieConnectionError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)


async def test_a_closed_port_fails_at_once_and_then_backs_off() -> None:
    (port,) = free_ports(1)
    async with BookieClient(lambda _: f"127.0.0.1:{port}") as client:
        with pytest.raises(BookieUnavailableError, match="cannot connect") as caught:
            await guarded(client.get_bookie_info("bk-gone"))
        assert caught.value.retriable
        with pytest.raises(
            BookieUnavailableError, match=r"after 1 consecutive failure.*next attempt in"
        ):
            await guarded(client.get_bookie_info("bk-gone"))


async def test_closing_the_client_ends_a_pending_long_poll(cluster: Cluster) -> None:
    target = cluster.topology.bookies[0]
    bookie, ledger = target.bookie_id, Ledger()
    client = local_client(cluster, target)
    await guarded(client.add_entry(bookie, ledger.ledger_id, 0, KEY, ledger.packet(0, -1, b"x")))
    poll = asyncio.create_task(client.read_lac_long_poll(bookie, ledger.ledger_id, -1, 10_000))
    await asyncio.sleep(0.2)
    await guarded(client.close())
    with pytest.raises(ClientClosedError) as caught:
        await guarded(poll)
    assert not caught.value.retriable
    with pytest.raises(ClientClosedError):
        await guarded(client.get_bookie_info(bookie))


# ------------------------------------------------------------------ lying fake bookies

Reply = Callable[[int], bytes]  # the txn id of the request -> the bytes to answer with


def random_frame(_: int) -> bytes:
    """A whole frame of random bytes: a complete frame that does not parse."""
    return b"\x00\x00\x00\x40" + random.Random(7).randbytes(64)


def oversize_length(_: int) -> bytes:
    return (16 << 20).to_bytes(4, "big") + b"\x00" * 16


def truncated_frame(txn_id: int) -> bytes:
    return encode_response(GetBookieInfoResponse(txn_id, StatusCode.EOK, 1, 1))[:-5]


@contextlib.asynccontextmanager
async def lying_bookie(reply: Reply, hang_up: bool) -> AsyncIterator[tuple[str, asyncio.Event]]:
    """A server that answers the first request with `reply`, then hangs up or waits; yields its
    address and an event set when the client closes the connection."""
    client_gone = asyncio.Event()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        decoder, requests = RequestFrameDecoder(), list[Request]()
        while not requests:
            data = await reader.read(65536)
            if not data:
                return
            requests = decoder.feed(data)
        writer.write(reply(requests[0].txn_id))
        await writer.drain()
        while not hang_up and await reader.read(65536):  # until the client gives up on us
            pass
        client_gone.set()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield f"127.0.0.1:{server.sockets[0].getsockname()[1]}", client_gone
    finally:
        server.close()
        await server.wait_closed()


@pytest.mark.parametrize(
    ("reply", "hang_up"),
    [(random_frame, False), (oversize_length, False), (truncated_frame, True)],
    ids=["random-frame", "oversize-length", "truncated-then-eof"],
)
async def test_bad_bytes_from_a_bookie_fail_the_request_and_close(
    reply: Reply, hang_up: bool
) -> None:
    async with (
        lying_bookie(reply, hang_up) as (address, client_gone),
        # Time stands still for the pool: its backoff (50 ms at first) cannot end before the
        # assertion below however slow the machine is.
        BookieClient(lambda _: address, clock=lambda: 0.0) as client,
    ):
        with pytest.raises(BookieProtocolError) as caught:
            await guarded(client.get_bookie_info("bk-liar"))
        assert isinstance(caught.value, ProtocolError) and caught.value.retriable
        assert f"bookie bk-liar (via {address})" in str(caught.value)
        await guarded(client_gone.wait())  # closed: by the client, or the liar hung up
        assert not client.is_available("bk-liar")


async def test_a_bookie_that_stops_mid_frame_is_dropped_at_the_timeout() -> None:
    config = BookieClientConfig(connection=ConnectionConfig(request_timeout_s=0.5))
    async with (
        lying_bookie(truncated_frame, False) as (address, client_gone),
        BookieClient(lambda _: address, config) as client,
    ):
        with pytest.raises(BookieTimeoutError, match=r"got no answer in 0\.(49|5)"):
            await guarded(client.get_bookie_info("bk-mute"))
        await guarded(client_gone.wait())  # no response completed: the link is stalled
        assert not client.is_available("bk-mute")
