"""Addresses barred in the kernel: the program on a listening socket drops the connection
requests of barred addresses (IPv4 and IPv6) and no others; bars lapse; a listener bars an
address past its rate, serves its connections already open, and serves it again after the bar;
handshakes begin a few per turn of the loop, the addresses taking turns."""

from __future__ import annotations

import asyncio
import errno
import http.client
import socket
import time
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from core.settings.limits import ProxyLimits
from region.admission import barring
from region.admission import listener as listener_module
from region.admission.barring import KernelBar
from region.admission.listener import Listener
from tests.unit.region.admission.test_connection_rate import certificates, hello, served

pytestmark = pytest.mark.unit

HOLD_S = 3.0  # long enough for the checks made while it lasts


def listening(family: int, host: str) -> socket.socket:
    s = socket.socket(family, socket.SOCK_STREAM)
    s.bind((host, 0))
    s.listen(16)
    return s


def connects(family: int, source: str, port: int, within_s: float) -> bool:
    """Whether a connection from `source` is made within `within_s` (False: the kernel dropped
    its request, so the connect timed out)."""
    host = "127.0.0.1" if family == socket.AF_INET else "::1"
    with socket.socket(family, socket.SOCK_STREAM) as client:
        client.bind((source, 0))
        client.settimeout(within_s)
        try:
            client.connect((host, port))
        except TimeoutError:
            return False
        return True


def test_the_program_drops_the_requests_of_barred_ipv4_addresses_only() -> None:
    with listening(socket.AF_INET, "127.0.0.1") as server:
        port = server.getsockname()[1]
        barred = [socket.inet_aton(a) for a in ("127.0.0.2", "127.0.0.4")]
        barring.attach(server, barring.program(socket.AF_INET, barred))
        assert connects(socket.AF_INET, "127.0.0.1", port, 2)
        assert not connects(socket.AF_INET, "127.0.0.2", port, 0.3)
        assert connects(socket.AF_INET, "127.0.0.3", port, 2)
        assert not connects(socket.AF_INET, "127.0.0.4", port, 0.3)
        barring.detach(server)
        assert connects(socket.AF_INET, "127.0.0.2", port, 2)


def test_the_program_compares_every_word_of_an_ipv6_address() -> None:
    with listening(socket.AF_INET6, "::1") as server:
        port = server.getsockname()[1]
        loopback = socket.inet_pton(socket.AF_INET6, "::1")
        # addresses that differ from ::1 in only one of its four words are not barred
        near = [loopback[:i] + b"\xff" + loopback[i + 1 :] for i in (0, 4, 8, 12)]
        barring.attach(server, barring.program(socket.AF_INET6, near))
        assert connects(socket.AF_INET6, "::1", port, 2)
        barring.attach(server, barring.program(socket.AF_INET6, [*near, loopback]))
        assert not connects(socket.AF_INET6, "::1", port, 0.3)


async def test_a_bar_grown_one_address_at_a_time_holds_the_most_addresses() -> None:
    """Each update swaps the socket's program for one an address longer: the kernel counts
    the old and the new against the socket's memory while it swaps them, unless the old is
    taken off first."""
    with listening(socket.AF_INET6, "::1") as server:
        port = server.getsockname()[1]
        bar = KernelBar()
        bar.listen_on([server])
        others = [f"2001:db8::{i:x}" for i in range(barring.BARRED_MAX - 1)]
        for address in [*others, "::1"]:
            assert bar.bar(address, 30)
            await asyncio.sleep(0)  # one update, one program, per address
        await asyncio.sleep(0.05)
        assert len(bar) == barring.BARRED_MAX and bar.barred("2001:db8::0")
        assert not await asyncio.to_thread(connects, socket.AF_INET6, "::1", port, 0.3)
        bar.close()
        assert await asyncio.to_thread(connects, socket.AF_INET6, "::1", port, 2)


async def test_where_the_kernel_has_no_memory_for_a_program_the_newest_bars_are_lifted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real_attach = barring.attach

    def attach_at_most_three(s: socket.socket, instructions: list[Any]) -> None:
        if len(instructions) > 3 * 3 + 1:  # three instructions an IPv4 address, and the keep
            raise OSError(errno.ENOMEM, "Cannot allocate memory")
        real_attach(s, instructions)

    monkeypatch.setattr(barring, "attach", attach_at_most_three)
    with listening(socket.AF_INET, "127.0.0.1") as server:
        port = server.getsockname()[1]
        bar = KernelBar()
        bar.listen_on([server])
        for n in range(2, 8):  # six at once: one update, refused, then the oldest three
            assert bar.bar(f"127.0.0.{n}", 30)
        await asyncio.sleep(0.05)
        assert [a for a in (f"127.0.0.{n}" for n in range(2, 8)) if bar.barred(a)] == [
            "127.0.0.2",
            "127.0.0.3",
            "127.0.0.4",
        ]
        assert not await asyncio.to_thread(connects, socket.AF_INET, "127.0.0.2", port, 0.3)
        assert await asyncio.to_thread(connects, socket.AF_INET, "127.0.0.7", port, 2)
        assert bar.bar("127.0.0.8", 30), "it goes on barring"
        bar.close()


async def test_a_bar_lapses_and_past_the_most_an_address_is_not_barred(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(barring, "BARRED_MAX", 2)
    with listening(socket.AF_INET, "127.0.0.1") as server:
        port = server.getsockname()[1]
        bar = KernelBar()
        assert not bar.bar("127.0.0.2", 1.5), "no socket yet: nothing to bar on"
        bar.listen_on([server])
        assert bar.bar("127.0.0.2", 1.5)
        lapses = time.monotonic() + 1.5
        assert not bar.bar("127.0.0.2", 1.5), "barred already"
        assert not bar.bar("not an address", 1.5)
        assert bar.bar("127.0.0.3", 30)
        assert not bar.bar("127.0.0.4", 30), "past BARRED_MAX"
        await asyncio.sleep(0.05)
        assert not await asyncio.to_thread(connects, socket.AF_INET, "127.0.0.2", port, 0.3)
        assert await asyncio.to_thread(connects, socket.AF_INET, "127.0.0.4", port, 2)
        await asyncio.sleep(lapses + 2 * barring.LAPSE_SLACK_S - time.monotonic())
        assert not bar.barred("127.0.0.2") and bar.barred("127.0.0.3")
        assert await asyncio.to_thread(connects, socket.AF_INET, "127.0.0.2", port, 2)
        assert len(bar) == 1
        bar.close()
        assert len(bar) == 0
        assert await asyncio.to_thread(connects, socket.AF_INET, "127.0.0.3", port, 2)
        assert bar.barred_total == 2
        assert not bar.bar("127.0.0.5", 1.5), "closed: no bar after"


@pytest.mark.parametrize("secure", [False, True], ids=["clear", "tls"])
async def test_an_address_past_its_rate_is_barred_until_its_hold_ends_and_keeps_its_connections(
    secure: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(listener_module, "refusal_hold_s", lambda rng: HOLD_S)
    tls_server, tls_client = certificates(tmp_path) if secure else (None, None)
    app = web.Application()
    app.router.add_get("/", hello)
    limits = ProxyLimits(connections_per_s_per_address=0.01, connection_burst_per_address=2)
    listener = Listener(app, limits)
    await listener.start("127.0.0.1", 0, tls_server)
    port = listener.port
    kept = (
        http.client.HTTPConnection("localhost", port, 5, ("127.0.0.1", 0))
        if tls_client is None
        else http.client.HTTPSConnection(
            "localhost", port, timeout=5, source_address=("127.0.0.1", 0), context=tls_client
        )
    )

    def ask_on_kept() -> bytes:
        kept.request("GET", "/")
        return kept.getresponse().read()

    try:
        assert await asyncio.to_thread(ask_on_kept) == b"hello"  # the first of its burst
        assert await asyncio.to_thread(served, port, "127.0.0.1", tls_client)
        refused = asyncio.ensure_future(asyncio.to_thread(served, port, "127.0.0.1", tls_client))
        for _ in range(100):  # accepted, refused: held until its reset at the hold's end
            if listener.rate.refused:
                break
            await asyncio.sleep(0.05)
        assert listener.rate.refused == 1 and listener.bar.barred("127.0.0.1")
        lapses = listener.bar._until["127.0.0.1"]
        # barred: the kernel drops its requests; the listener does not even see them
        assert not await asyncio.to_thread(connects, socket.AF_INET, "127.0.0.1", port, 0.3)
        assert listener.rate.refused == 1
        assert await asyncio.to_thread(ask_on_kept) == b"hello", "its open connection served"
        assert await asyncio.to_thread(served, port, "127.0.0.2", tls_client)
        assert not await refused
        # after the hold the bar is lifted: a connection from it is made (and refused by
        # its rate, as its bucket is still empty: held and reset as before)
        await asyncio.sleep(lapses + 2 * barring.LAPSE_SLACK_S - time.monotonic())
        assert not listener.bar.barred("127.0.0.1")
        assert await asyncio.to_thread(connects, socket.AF_INET, "127.0.0.1", port, 2)
    finally:
        kept.close()
        await asyncio.wait_for(listener.stop(), 15)
    assert len(listener.bar) == 0, "a stopped listener lifts its bars"


async def test_handshakes_begin_a_few_per_turn_with_the_addresses_taking_turns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    app = web.Application()
    listener = Listener(app, ProxyLimits(connection_burst_per_address=100))
    begun: list[tuple[int, str]] = []  # (turn of the loop, address)
    turn = 0
    sockets: list[socket.socket] = []
    all_begun = asyncio.Event()

    async def hand_on(connection: socket.socket) -> None:
        begun.append((turn, connection.getsockname()[0]))
        connection.close()
        if len(begun) == 12:
            all_begun.set()

    monkeypatch.setattr(listener, "_hand_on", hand_on)
    loop = asyncio.get_running_loop()

    def tick() -> None:
        nonlocal turn
        turn += 1
        if turn < 50:
            loop.call_soon(tick)

    for address, count in (("127.0.0.1", 9), ("127.0.0.2", 2), ("127.0.0.3", 1)):
        for _ in range(count):
            # an accepted connection stands in: what is handed on is only told apart by name
            connection = socket.socket()
            connection.bind((address, 0))
            sockets.append(connection)
            listener._accepted(connection, address)
    loop.call_soon(tick)
    await asyncio.wait_for(all_begun.wait(), 5)
    per_turn: dict[int, list[str]] = {}
    for at, address in begun:
        per_turn.setdefault(at, []).append(address)
    assert all(len(a) <= listener_module.HANDSHAKES_PER_TURN for a in per_turn.values()), per_turn
    order = [address for _, address in begun]
    assert order[:4] == ["127.0.0.1", "127.0.0.2", "127.0.0.3", "127.0.0.1"], order
    assert order[4:6] == ["127.0.0.2", "127.0.0.1"], order
    assert order.count("127.0.0.1") == 9
    await listener.stop()
    for connection in sockets:
        connection.close()


async def test_past_the_most_connections_waiting_for_a_handshake_a_new_one_is_reset(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(listener_module, "WAITING_MAX", 2)
    listener = Listener(web.Application(), ProxyLimits(connection_burst_per_address=100))
    handed: list[socket.socket] = []

    async def hand_on(connection: socket.socket) -> None:
        handed.append(connection)
        connection.close()

    monkeypatch.setattr(listener, "_hand_on", hand_on)
    connections = [socket.socket() for _ in range(3)]
    for connection in connections:  # in one go: the pacer has not run yet
        listener._accepted(connection, "127.0.0.1")
    assert connections[2].fileno() == -1, "the third is reset at once"
    assert listener._waiting_count == 2
    for _ in range(5):
        await asyncio.sleep(0)
    assert handed == connections[:2] and listener._waiting_count == 0
    await listener.stop()
