"""What a proxy lets in: quotas per client and namespace, connections within their cap and
deadlines, and the proxy-wide budgets of read-aheads and producer tables."""

from __future__ import annotations

import asyncio
import json
import random
import statistics
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from core.dlsn import DLSN
from core.errors import QuotaExceededError
from core.settings.limits import ProxyLimits, Quota
from region.admission import listener as listener_module
from region.admission import quotas as quotas_module
from region.admission.listener import Listener, request_body
from region.admission.quotas import (
    HOLD_MAX_S,
    HOLD_SPREAD,
    HOLDS_MAX,
    REFUSAL_HOLD_S,
    Quotas,
    RefusalHolds,
    hold_refusal,
    refusal_hold_s,
)
from region.admission.slots import ClientTurns
from region.client.proxy_client import retry_after_s
from region.http_errors import error_middleware
from region.idempotence.producers import ProducerBudget, ProducerTable
from writer.events import Written

pytestmark = pytest.mark.unit


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def quotas(clock: Clock, buckets_max: int = 1000, **rates: Any) -> Quotas:
    quota = Quota(**{"append_bytes_per_s": None, "append_requests_per_s": None, **rates})
    limits = ProxyLimits(quota=quota, namespace_quotas=(("open", Quota(None, None, None, None)),))
    return Quotas(limits, "append", clock, buckets_max)


def test_requests_past_the_rate_wait_until_the_bucket_lets_one_in() -> None:
    clock = Clock()
    table = quotas(clock, append_requests_per_s=10)
    for _ in range(10):
        table.admit("10.0.0.1", "ns")
    with pytest.raises(QuotaExceededError) as refused:
        table.admit("10.0.0.1", "ns")
    assert refused.value.retry_after_s == pytest.approx(0.1)
    assert "10 requests/s" in str(refused.value) and "'ns'" in str(refused.value)
    table.admit("10.0.0.2", "ns")  # another client: its own bucket
    table.admit("10.0.0.1", "other")  # another namespace: its own bucket
    table.admit("10.0.0.1", "open")  # a namespace whose override has no limit
    clock.now += 0.101
    table.admit("10.0.0.1", "ns")


def test_a_budget_holds_burst_s_worth_and_refills_at_the_rate() -> None:
    """A quiet client may spend `burst_s` of its rate at once, then is held to the rate; a
    budget of requests holds at least one whatever the burst."""
    clock = Clock()
    table = quotas(clock, append_requests_per_s=100, append_bytes_per_s=1000, burst_s=0.1)
    for _ in range(10):
        table.admit("c", "ns")
    with pytest.raises(QuotaExceededError):
        table.admit("c", "ns")
    clock.now += 60  # quiet for a minute: still a tenth of a second's worth, not a minute's
    for _ in range(10):
        table.admit("c", "ns")
    with pytest.raises(QuotaExceededError):
        table.admit("c", "ns")
    clock.now += 60
    table.admit("d", "ns", 100)  # the bytes' budget: 100 spent, into debt past it
    table.admit("d", "ns", 1)
    assert table.wait_s("d", "ns") == pytest.approx(0.001)
    slow = quotas(clock, append_requests_per_s=2, burst_s=0.01)  # 0.02 requests' worth
    slow.admit("c", "ns")
    with pytest.raises(QuotaExceededError) as refused:
        slow.admit("c", "ns")
    assert refused.value.retry_after_s == pytest.approx(0.5)


def test_bytes_go_into_debt_once_and_the_next_request_waits_it_out() -> None:
    clock = Clock()
    table = quotas(clock, append_bytes_per_s=1000)
    table.admit("c", "ns", 5000)  # larger than a second's worth: let in, into debt
    with pytest.raises(QuotaExceededError) as refused:
        table.admit("c", "ns", 1)
    assert refused.value.retry_after_s == pytest.approx(4.0)
    clock.now += 4.0
    table.admit("c", "ns", 10)
    table.take_bytes("c", "ns", 2000)  # a read's page, taken once built
    assert table.wait_s("c", "ns") == pytest.approx(2.01)  # 10 + 2000 bytes of debt at 1000/s


def test_an_expensive_request_takes_more_requests_of_the_quota() -> None:
    clock = Clock()
    table = quotas(clock, append_requests_per_s=10)
    table.admit("c", "ns")
    table.take_requests("c", "ns", 9)  # it opened a reader: 10 requests in all
    with pytest.raises(QuotaExceededError) as refused:
        table.admit("c", "ns")
    assert refused.value.retry_after_s == pytest.approx(0.1)
    table.take_requests("c", "ns", 0)  # nothing more: no change
    clock.now += 0.101
    table.admit("c", "ns")


def test_the_table_is_bounded_and_drops_buckets_that_refilled() -> None:
    clock = Clock()
    table = quotas(clock, buckets_max=100, append_requests_per_s=5)
    for i in range(100):
        table.admit(f"c{i}", "ns")
    with pytest.raises(QuotaExceededError, match="its most"):
        table.admit("newcomer", "ns")  # every bucket was used within the last second
    assert len(table) == 100
    clock.now += 1.0  # all refilled: the same as no bucket at all
    table.admit("newcomer", "ns")
    assert len(table) == 1


async def test_a_refusal_is_answered_about_a_second_after_its_request() -> None:
    loop = asyncio.get_running_loop()
    short, long = QuotaExceededError("x", 0.01), QuotaExceededError("y", 5.0)
    holds = RefusalHolds(50)
    began = loop.time()
    await hold_refusal(short, holds, "client")
    held_s = loop.time() - began
    began = loop.time()
    await hold_refusal(long, holds, "client")
    long_held_s = loop.time() - began
    shortest, longest = REFUSAL_HOLD_S * (1 - HOLD_SPREAD), REFUSAL_HOLD_S * (1 + HOLD_SPREAD)
    for took in (held_s, long_held_s):  # REFUSAL_HOLD_S, spread, however short the wait
        assert shortest <= took < longest + 0.5
    assert short.retry_after_s == 0.0
    # what is left of the wait after the hold (the hold as meant; the loop may wake late)
    assert 5.0 - long_held_s <= long.retry_after_s <= 5.0 - shortest
    assert len(holds) == 0


def test_refusals_are_held_for_spread_times() -> None:
    """Refusals held for one fixed time all come back in one turn of the loop; spread, the
    holds cover the range evenly."""
    rng = random.Random(7)
    holds = [refusal_hold_s(rng) for _ in range(2000)]
    shortest, longest = REFUSAL_HOLD_S * (1 - HOLD_SPREAD), REFUSAL_HOLD_S * (1 + HOLD_SPREAD)
    assert all(shortest <= h <= longest for h in holds)
    assert len({round(h, 2) for h in holds}) > 50, "not one time for all"
    assert statistics.mean(holds) == pytest.approx(REFUSAL_HOLD_S, abs=0.05)


async def test_a_client_refused_on_many_connections_gets_about_its_rate_of_refusals(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """200 connections of one client, each sending again the moment it is refused, for 3 s:
    held a fixed 0.1 s they would get 6 000 refusals; with `refusals_per_s_per_client` = 100
    they get about 300 after the first 200, while another client's one refusal is held the
    usual time. The table is empty after."""
    monkeypatch.setattr(quotas_module, "REFUSAL_HOLD_S", 0.1)
    holds = RefusalHolds(100)
    loop = asyncio.get_running_loop()
    answered = 0
    end = loop.time() + 3.0

    async def connection() -> None:
        nonlocal answered
        while loop.time() < end:
            await holds.hold("subject greedy")
            answered += 1

    greedy = [asyncio.create_task(connection()) for _ in range(200)]
    await asyncio.sleep(1.0)
    assert len(holds) == 1 and holds.total == 200
    began = loop.time()
    other_s = await holds.hold("subject polite")
    assert other_s <= 0.1 * (1 + HOLD_SPREAD) and loop.time() - began < 1.0
    await asyncio.gather(*greedy)
    assert 200 <= answered <= 2 * 100 * 3 + 200, answered
    assert len(holds) == 0 and holds.total == 0


async def test_a_clients_holds_lengthen_with_its_refusals_held_up_to_hold_max_s(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(quotas_module, "REFUSAL_HOLD_S", 0.1)
    holds = RefusalHolds(100)  # 50 held at once: the 50th about 0.5 s
    held = await asyncio.gather(*(holds.hold("subject greedy") for _ in range(50)))
    assert min(held) <= 0.1 * (1 + HOLD_SPREAD) < 0.5 * (1 - HOLD_SPREAD) <= max(held)
    monkeypatch.setattr(quotas_module, "HOLD_MAX_S", 0.3)
    held = await asyncio.gather(*(holds.hold("subject greedy") for _ in range(50)))
    assert max(held) == pytest.approx(0.3)
    assert HOLD_MAX_S == 10.0  # the documented bound


async def test_past_holds_max_refusals_held_one_is_answered_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(quotas_module, "HOLDS_MAX", 5)
    holds = RefusalHolds(50)
    held = [asyncio.create_task(holds.hold(f"subject {i}")) for i in range(5)]
    await asyncio.sleep(0.05)
    assert holds.total == 5
    assert await asyncio.wait_for(holds.hold("subject six"), 0.2) == 0.0
    await asyncio.gather(*held)
    assert holds.total == 0 and len(holds) == 0
    assert quotas_module.HOLDS_MAX == 5 and HOLDS_MAX == 10_000  # the documented bound


def test_retry_after_is_read_as_seconds_within_bounds() -> None:
    assert retry_after_s("3") == 3.0
    assert retry_after_s(None) == 1.0
    assert retry_after_s("soon") == 1.0
    assert retry_after_s("100000") == 60.0


async def started(app: web.Application, limits: ProxyLimits) -> Listener:
    listener = Listener(app, limits)
    await listener.start("127.0.0.1", 0)
    return listener


async def echo(request: web.Request) -> web.Response:
    body = await request_body(request, ProxyLimits(body_timeout_s=0.3))
    return web.Response(body=body)


async def test_connections_past_the_cap_are_refused_and_those_open_are_served() -> None:
    app = web.Application()
    app.router.add_post("/echo", echo)
    listener = await started(app, ProxyLimits(connections_max=3))
    url = f"http://127.0.0.1:{listener.port}/echo"
    try:
        async with aiohttp.ClientSession() as served:
            async with served.post(url, data=b"first") as answer:  # its pooled connection
                assert await answer.read() == b"first"
            idle = [await asyncio.open_connection("127.0.0.1", listener.port) for _ in range(2)]
            await asyncio.sleep(0.05)
            reader, writer = await asyncio.open_connection("127.0.0.1", listener.port)
            refused = await asyncio.wait_for(reader.read(), 5)
            head, _, body = refused.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 429") and json.loads(body)["code"] == "over_capacity"
            assert listener.refused == 1
            async with served.post(url, data=b"again") as answer:  # kept-alive: still served
                assert await answer.read() == b"again"
            for _, idle_writer in idle:
                idle_writer.close()
            writer.close()
    finally:
        await listener.stop()


async def test_a_request_whose_headers_trickle_in_is_cut_off_at_the_idle_deadline() -> None:
    app = web.Application()
    app.router.add_post("/echo", echo)
    listener = await started(app, ProxyLimits(idle_timeout_s=0.5))
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", listener.port)
        loop = asyncio.get_running_loop()
        began = loop.time()
        cut_after_s = None
        writer.write(b"POST /echo HTTP/1.1\r\nHost: x\r\n")
        for i in range(20):  # a header line every 0.1 s, never the blank line: a slow loris
            try:
                writer.write(f"X-Slow-{i}: {i}\r\n".encode())
                await writer.drain()
            except (ConnectionResetError, BrokenPipeError):
                cut_after_s = loop.time() - began
                break
            if reader.at_eof():  # closed by the proxy
                cut_after_s = loop.time() - began
                break
            await asyncio.sleep(0.1)
        assert cut_after_s is not None, "the proxy waited for every trickled byte"
        assert 0.5 <= cut_after_s < 1.9  # at the deadline
        writer.close()
    finally:
        await listener.stop()


async def test_a_body_that_does_not_come_is_answered_request_timeout() -> None:
    app = web.Application(middlewares=[error_middleware])
    app.router.add_post("/echo", echo)
    listener = await started(app, ProxyLimits())
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", listener.port)
        writer.write(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\npartial")
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        assert head.startswith(b"HTTP/1.1 408")
        body = await asyncio.wait_for(reader.read(), 5)  # then the proxy closes: the rest of
        assert json.loads(body)["code"] == "request_timeout"  # the body is not waited for
        writer.close()
        await writer.wait_closed()
    finally:
        await listener.stop()


async def test_a_stop_ends_handlers_of_stalled_bodies_within_its_grace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(listener_module, "STOP_GRACE_S", 0.5)
    patient = ProxyLimits(body_timeout_s=600)

    async def slow_echo(request: web.Request) -> web.Response:
        return web.Response(body=await request_body(request, patient))

    app = web.Application(middlewares=[error_middleware])
    app.router.add_post("/echo", slow_echo)
    listener = await started(app, patient)
    stalled = []
    for _ in range(3):  # each sends part of its body, then nothing, for ever
        _, writer = await asyncio.open_connection("127.0.0.1", listener.port)
        writer.write(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\npart")
        await writer.drain()
        stalled.append(writer)
    await asyncio.sleep(0.2)
    started_at = asyncio.get_running_loop().time()
    await listener.stop()
    assert asyncio.get_running_loop().time() - started_at < 0.5 + 1.0, "not the body deadline"
    for writer in stalled:
        writer.close()


def written(seq: int) -> Written:
    return Written(DLSN(1, seq, 0), seq, seq)


def test_the_producer_budget_takes_from_the_stream_that_remembers_the_most() -> None:
    budget = ProducerBudget(most=1000)
    calm, noisy = ProducerTable(budget=budget), ProducerTable(budget=budget)
    for seq in range(100):
        calm.record(1, seq, written(seq))
    for producer in range(5000):  # a client naming a new producer for every write
        noisy.record(producer, 0, written(producer))
    assert budget.used <= 1000 and budget.used == calm.acks + noisy.acks
    assert calm.acks == 100 and calm.lookup(1, 0) == written(0)  # the calm stream keeps all
    assert noisy.last_seq(4999) == 0 and noisy.last_seq(0) is None  # the oldest went
    noisy.close()
    assert budget.used == 100


async def test_a_clients_tails_send_one_batch_at_a_time_and_others_do_not_wait_for_them() -> None:
    """ClientTurns: a client's tails take its turn one batch at a time, first come first
    served; another client's batch goes meanwhile; the table keeps only clients in a turn or
    waiting for one."""
    turns = ClientTurns()
    order: list[str] = []
    release = asyncio.Event()

    async def batch(client: str, tail: str, hold: bool = False) -> None:
        async with turns.turn(client):
            order.append(f"{tail} in")
            if hold:
                await release.wait()
            await asyncio.sleep(0)
            order.append(f"{tail} out")

    first = asyncio.create_task(batch("attacker", "a1", hold=True))
    await asyncio.sleep(0)
    others = [asyncio.create_task(batch("attacker", f"a{i}")) for i in (2, 3)]
    canary = asyncio.create_task(batch("canary", "c1"))
    await asyncio.wait_for(canary, 1)  # not behind the attacker's turn
    assert order == ["a1 in", "c1 in", "c1 out"]
    assert len(turns) == 1, "the canary's entry went with its turn"
    release.set()
    await asyncio.wait_for(asyncio.gather(first, *others), 1)
    assert order[3:] == ["a1 out", "a2 in", "a2 out", "a3 in", "a3 out"]
    assert len(turns) == 0


async def test_a_turn_cancelled_while_waiting_leaves_the_others_theirs() -> None:
    turns = ClientTurns()
    holding = asyncio.Event()
    release = asyncio.Event()

    async def hold() -> None:
        async with turns.turn("c"):
            holding.set()
            await release.wait()

    holder = asyncio.create_task(hold())
    await holding.wait()
    waiter = asyncio.create_task(hold())
    await asyncio.sleep(0)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert len(turns) == 1
    release.set()
    await holder
    assert len(turns) == 0
    async with asyncio.timeout(1), turns.turn("c"):  # free again
        pass
