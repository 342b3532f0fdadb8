"""New connections per address: a bucket per address, refused before any TLS handshake, the
table bounded; a proxy's listener resets an address past its rate (over TLS too) while
another address is served."""

from __future__ import annotations

import asyncio
import datetime
import http.client
import socket
import ssl
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import pytest
import uvloop
from aiohttp import web

from core.security.pki import Authority, client_context, server_context, write_host
from core.settings.limits import ProxyLimits
from region.admission import barring
from region.admission import listener as listener_module
from region.admission.accepts import ConnectionRate
from region.admission.listener import Listener
from region.admission.quotas import REFUSAL_HOLD_S
from tests.unit.region.admission.test_admission import Clock

pytestmark = pytest.mark.unit


def test_an_address_gets_its_burst_then_its_rate_and_others_are_not_touched() -> None:
    clock = Clock()
    rate = ConnectionRate(per_s=2.0, burst=5, clock=clock)
    assert [rate.admit("10.0.0.1") for _ in range(6)] == [True] * 5 + [False]
    assert rate.admit("10.0.0.2")  # another address has its own bucket
    clock.now += 0.5  # one token back
    assert rate.admit("10.0.0.1") and not rate.admit("10.0.0.1")
    clock.now += 100  # refilled to the burst, not beyond
    assert sum(rate.admit("10.0.0.1") for _ in range(10)) == 5
    assert rate.refused == 1 + 1 + 5


def test_a_rate_of_zero_admits_every_connection_and_keeps_no_table() -> None:
    rate = ConnectionRate(per_s=0, burst=1)
    assert all(rate.admit("10.0.0.1") for _ in range(1000)) and len(rate) == 0


def test_the_table_of_addresses_is_bounded_by_forgetting_the_least_recent() -> None:
    clock = Clock()
    rate = ConnectionRate(per_s=1.0, burst=1, clock=clock, addresses_max=100)
    assert rate.admit("a") and not rate.admit("a")
    for i in range(1000):
        rate.admit(f"10.0.{i // 256}.{i % 256}")
    assert len(rate) == 100
    assert rate.admit("a")  # forgotten: a full bucket again


def test_a_rate_that_cannot_work_is_refused() -> None:
    with pytest.raises(ValueError, match="burst"):
        ConnectionRate(per_s=1.0, burst=0)


def run_on(loop: str, main: Coroutine[Any, Any, None]) -> None:
    """Runs `main` on a new loop of that kind: the proxies' (uvloop) or asyncio's own."""
    if loop == "uvloop":
        uvloop.run(main)
    else:
        asyncio.run(main)


async def hello(_: web.Request) -> web.Response:
    return web.Response(text="hello")


def served(port: int, source: str, tls: ssl.SSLContext | None) -> bool:
    """Whether one request on a new connection from `source` is answered (False: reset or
    closed). A blocking client in a thread of its own: its hello races the proxy's accept as a
    remote client's would, not behind the loop's own callbacks."""
    connection: http.client.HTTPConnection
    if tls is None:
        connection = http.client.HTTPConnection("localhost", port, 5, (source, 0))
    else:
        connection = http.client.HTTPSConnection(
            "localhost", port, timeout=5, source_address=(source, 0), context=tls
        )
    try:
        connection.request("GET", "/")
        return connection.getresponse().read() == b"hello"
    except (OSError, http.client.HTTPException):
        return False
    finally:
        connection.close()


def certificates(folder: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    now = datetime.datetime.now(datetime.UTC)
    authority = Authority.make("test", now)
    authority.save(folder / "ca.pem", folder / "ca.key")
    cert, key = authority.issue("localhost", now)
    write_host(folder / "host.pem", folder / "host.key", cert, key)
    return server_context(folder / "host.pem", folder / "host.key"), client_context(
        folder / "ca.pem"
    )


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])  # the proxies run on uvloop
@pytest.mark.parametrize("secure", [False, True], ids=["clear", "tls"])
def test_an_address_past_its_rate_is_reset_and_another_is_served(
    secure: bool, loop: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(listener_module, "refusal_hold_s", lambda rng: REFUSAL_HOLD_S)
    tls_server, tls_client = certificates(tmp_path) if secure else (None, None)

    async def run() -> None:
        app = web.Application()
        app.router.add_get("/", hello)
        limits = ProxyLimits(connections_per_s_per_address=0.5, connection_burst_per_address=3)
        listener = Listener(app, limits)
        await listener.start("127.0.0.1", 0, tls_server)
        try:
            port = listener.port
            answers = [await asyncio.to_thread(served, port, "127.0.0.1", tls_client)]
            answers += [await asyncio.to_thread(served, port, "127.0.0.1", tls_client)]
            answers += [await asyncio.to_thread(served, port, "127.0.0.1", tls_client)]
            began = asyncio.get_running_loop().time()
            answers += [await asyncio.to_thread(served, port, "127.0.0.1", tls_client)]
            held_s = asyncio.get_running_loop().time() - began
            assert answers == [True, True, True, False]
            assert REFUSAL_HOLD_S <= held_s < REFUSAL_HOLD_S + 2  # held, then reset
            assert listener.rate.refused == 1
            assert await asyncio.to_thread(served, port, "127.0.0.2", tls_client)
            await asyncio.sleep(0.1)
            assert listener.open_connections == 0  # each closed after its answer
        finally:
            await asyncio.wait_for(listener.stop(), 15)

    run_on(loop, run())


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_connections_past_the_cap_are_answered_429_over_tls_and_the_listener_stops(
    loop: str, tmp_path: Path
) -> None:
    tls_server, tls_client = certificates(tmp_path)

    def refused_answer(port: int) -> bytes:
        with (
            socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
            tls_client.wrap_socket(raw, server_hostname="localhost") as secure,
        ):
            secure.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            answer = b""
            while chunk := secure.recv(4096):
                answer += chunk
            return answer

    async def run() -> None:
        app = web.Application()
        app.router.add_get("/", hello)
        listener = Listener(app, ProxyLimits(connections_max=1))
        await listener.start("127.0.0.1", 0, tls_server)
        try:
            held = await asyncio.to_thread(
                lambda: tls_client.wrap_socket(
                    socket.create_connection(("127.0.0.1", listener.port), timeout=5),
                    server_hostname="localhost",
                )
            )
            await asyncio.sleep(0.1)
            answer = await asyncio.to_thread(refused_answer, listener.port)
            assert answer.startswith(b"HTTP/1.1 429"), answer[:80]
            assert b"over_capacity" in answer and listener.refused == 1
            # plaintext on the TLS port: closed, and the listener goes on
            with socket.create_connection(("127.0.0.1", listener.port), timeout=5) as plain:
                plain.sendall(b"GET / HTTP/1.1\r\n\r\n")
                assert await asyncio.to_thread(plain.recv, 4096) == b""
            held.close()
        finally:
            await asyncio.wait_for(listener.stop(), 15)

    run_on(loop, run())


async def test_refused_connections_held_are_bounded_and_past_the_bound_reset_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(listener_module, "HELD_MAX", 2)
    monkeypatch.setattr(listener_module, "refusal_hold_s", lambda rng: REFUSAL_HOLD_S)
    monkeypatch.setattr(barring, "BARRED_MAX", 0)  # no bar in the kernel: refusal by reset alone
    app = web.Application()
    app.router.add_get("/", hello)
    limits = ProxyLimits(connections_per_s_per_address=0.01, connection_burst_per_address=1)
    listener = Listener(app, limits)
    await listener.start("127.0.0.1", 0)
    loop = asyncio.get_running_loop()
    try:
        assert await asyncio.to_thread(served, listener.port, "127.0.0.1", None)
        held = [await asyncio.open_connection("127.0.0.1", listener.port) for _ in range(2)]
        await asyncio.sleep(0.1)
        assert len(listener._held) == 2  # held, unread
        began = loop.time()
        assert not await asyncio.to_thread(served, listener.port, "127.0.0.1", None)
        assert loop.time() - began < REFUSAL_HOLD_S / 2, "past the bound: reset at once"
        assert len(listener._held) == 2
        for reader, writer in held:  # each reset once its hold is over
            assert await asyncio.wait_for(reader.read(), REFUSAL_HOLD_S + 5) == b""
            writer.close()
        assert not listener._held
    finally:
        await asyncio.wait_for(listener.stop(), 15)
