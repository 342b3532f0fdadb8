"""New connections per address: a bucket per address, refused before any TLS handshake, the
table bounded; a proxy's listener resets an address past its rate (over TLS too) while
another address is served."""

from __future__ import annotations

import asyncio
import datetime
import ssl
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from core.security.pki import Authority, client_context, server_context, write_host
from core.settings.limits import ProxyLimits
from region.admission.accepts import ConnectionRate
from region.admission.listener import Listener

pytestmark = pytest.mark.unit


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


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


async def hello(_: web.Request) -> web.Response:
    return web.Response(text="hello")


async def connects(port: int, source: str, tls: ssl.SSLContext | None) -> bool:
    """Whether a connection from `source` is served a request (False: reset or closed)."""
    connector = aiohttp.TCPConnector(local_addr=(source, 0), force_close=True)
    scheme = "https" if tls else "http"
    try:
        async with (
            aiohttp.ClientSession(connector=connector) as session,
            session.get(f"{scheme}://localhost:{port}/", ssl=tls or False) as answer,
        ):
            return await answer.text() == "hello"
    except aiohttp.ClientError:
        return False


@pytest.mark.parametrize("secure", [False, True], ids=["clear", "tls"])
async def test_an_address_past_its_rate_is_reset_and_another_is_served(
    secure: bool, tmp_path: Path
) -> None:
    tls_server = tls_client = None
    if secure:
        now = datetime.datetime.now(datetime.UTC)
        authority = Authority.make("test", now)
        authority.save(tmp_path / "ca.pem", tmp_path / "ca.key")
        cert, key = authority.issue("localhost", now)
        write_host(tmp_path / "host.pem", tmp_path / "host.key", cert, key)
        tls_server = server_context(tmp_path / "host.pem", tmp_path / "host.key")
        tls_client = client_context(tmp_path / "ca.pem")
    app = web.Application()
    app.router.add_get("/", hello)
    limits = ProxyLimits(connections_per_s_per_address=0.5, connection_burst_per_address=3)
    listener = Listener(app, limits)
    await listener.start("127.0.0.1", 0, tls_server)
    try:
        served = [await connects(listener.port, "127.0.0.1", tls_client) for _ in range(5)]
        assert served == [True, True, True, False, False]
        assert listener.rate.refused >= 2  # (a client may try a reset request again)
        assert await connects(listener.port, "127.0.0.2", tls_client)  # its own bucket
        assert listener.open_connections <= 1
    finally:
        await asyncio.wait_for(listener.stop(), 15)
