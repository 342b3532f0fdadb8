"""The deterministic loop and the simulated network under globelog's real bookie client: time
is virtual, a crashed host runs nothing more, a paused one runs later, the same seed replays
the same run, threads are refused, and the real client sees resets, refusals and silence as it
would on a real network."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from core import runtime
from global_meta import SessionState
from ledger.codecs.entry import DigestType, EntryCodec, master_key
from ledger.connections.bookie_client import BookieClient
from ledger.errors import BookieTimeoutError, BookieUnavailableError, ConnectionLostError
from verify.sim.bookie import SimBookie
from verify.sim.io import loop as loop_module
from verify.sim.io.bookie_server import BookieServer
from verify.sim.io.http import SimConnector
from verify.sim.io.loop import (
    WALL_EPOCH_S,
    Host,
    SimLoop,
    SimulationError,
    SpinningError,
    StuckError,
    run,
)
from verify.sim.io.network import Network
from verify.sim.io.zookeeper import SimMetaStore, ZooKeeperEnsemble

KEY = master_key(b"sim")
WAN_S = 0.05
_PAIRS = [("a", "b"), ("a", "c"), ("b", "c")]


class World:
    def __init__(self, seed: int = 1) -> None:
        self.loop = SimLoop(seed)
        self.network = Network(self.loop, self.loop.rng, {frozenset(("east", "west")): WAN_S})
        self.client_host = self.loop.add_host("client", "east", "127.0.50.1")
        self.bookie_host = self.loop.add_host("bookie", "west", "127.0.50.2")
        self.server = BookieServer(self.loop, self.network, self.bookie_host, SimBookie("b"))
        self.server.start()
        self.codec = EntryCodec(7, DigestType.CRC32C, b"sim")

    def client(self) -> BookieClient:
        return BookieClient(lambda _bookie: self.server.address)

    def packet(self, entry_id: int, lac: int, payload: bytes = b"x") -> bytes:
        return self.codec.encode_entry(entry_id, lac, entry_id + 1, payload)

    def run(self, host: Host, coro: Coroutine[Any, Any, Any]) -> Any:
        async def main() -> Any:
            return await self.loop.spawn(host, coro)

        return run(self.loop, main())


def test_time_is_virtual_and_wall_clock_readings_follow_it() -> None:
    loop = SimLoop(1)

    async def main() -> tuple[float, float, int]:
        await asyncio.sleep(3600)
        return loop.time(), runtime.monotonic(), runtime.wall_ms()

    assert run(loop, main()) == (3600.0, 3600.0, int((WALL_EPOCH_S + 3600) * 1000))


def test_a_crashed_host_runs_nothing_more_and_a_paused_one_runs_when_it_resumes() -> None:
    loop = SimLoop(1)
    crashed, paused = loop.add_host("c", "r", "127.0.51.1"), loop.add_host("p", "r", "127.0.51.2")
    ticks: dict[str, list[float]] = {"c": [], "p": []}

    async def tick(name: str) -> None:
        while True:
            await asyncio.sleep(1)
            ticks[name].append(loop.time())

    async def main() -> None:
        loop.spawn(crashed, tick("c"))
        loop.spawn(paused, tick("p"))
        await asyncio.sleep(2.5)
        loop.crash(crashed)
        loop.pause(paused)
        await asyncio.sleep(5)
        loop.resume(paused)
        await asyncio.sleep(1.1)

    run(loop, main())
    assert ticks["c"] == [1.0, 2.0]
    # the tick due at 3.0 waited for the resume at 7.5; the next came a second later
    assert ticks["p"] == [1.0, 2.0, 7.5, 8.5]


def test_the_same_seed_replays_the_same_run_and_another_seed_differs() -> None:
    def timeline(seed: int) -> list[tuple[float, int]]:
        world = World(seed)
        seen: list[tuple[float, int]] = []

        async def write() -> None:
            async with world.client() as client:
                for entry in range(20):
                    await client.add_entry("b", 7, entry, KEY, world.packet(entry, entry - 1))
                    seen.append((world.loop.time(), entry))

        world.run(world.client_host, write())
        return seen

    assert timeline(3) == timeline(3)
    assert timeline(3) != timeline(4)
    first, last = timeline(3)[0][0], timeline(3)[-1][0]
    assert last - first >= 19 * 2 * WAN_S * 0.7  # each add is a WAN round trip (jitter 30 %)


def test_threads_and_waits_on_nothing_are_refused() -> None:
    async def thread() -> None:
        await asyncio.to_thread(print)

    with pytest.raises(SimulationError, match="threads are not simulated"):
        run(SimLoop(1), thread())

    async def forever() -> None:
        await asyncio.get_running_loop().create_future()

    with pytest.raises(StuckError, match="nothing is ready"):
        run(SimLoop(1), forever())


def test_a_loop_that_retries_at_once_for_ever_is_called_spinning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A timeout of a few ulps fires at once without moving virtual time (the float trap the
    page reader fell into): the simulation ends it instead of hanging."""
    monkeypatch.setattr(loop_module, "SPIN_TURNS_MAX", 10_000)

    async def retries() -> None:
        await asyncio.sleep(30.0)  # where 1e-18 s is below a float's step: time cannot move
        while True:
            try:
                async with asyncio.timeout(1e-18):
                    await asyncio.get_running_loop().create_future()
            except TimeoutError:
                continue

    with pytest.raises(SpinningError, match="without virtual time moving"):
        run(SimLoop(1), retries())


def test_the_real_client_sees_a_reset_a_refusal_and_then_silence() -> None:
    world = World()
    loop, bookie = world.loop, world.bookie_host
    seen: list[str] = []

    async def client_side() -> None:
        async with world.client() as client:
            await client.add_entry("b", 7, 0, KEY, world.packet(0, -1))
            loop.crash(bookie)  # the process dies, its machine answers: a reset
            with pytest.raises(ConnectionLostError, match="reset"):
                await client.read_entry("b", 7, 0)
            seen.append("reset")
            await asyncio.sleep(2)  # past the client's back-off
            with pytest.raises(BookieUnavailableError, match="refused"):
                await client.read_entry("b", 7, 0)
            seen.append("refused")
            loop.restart(bookie)
            world.server.start()  # the journal kept the entry
            await asyncio.sleep(2)
            answer = await client.read_entry("b", 7, 0)
            assert world.codec.decode_entry(answer.body or b"", 0).payload == b"x"
            seen.append("read after restart")
            loop.crash(bookie, machine_up=False)  # the machine is gone: nothing answers
            started = loop.time()
            with pytest.raises(BookieTimeoutError):
                await client.read_entry("b", 7, 0)
            assert loop.time() - started >= client.config.connection.request_timeout_s
            seen.append("timeout")

    world.run(world.client_host, client_side())
    assert seen == ["reset", "refused", "read after restart", "timeout"]


def test_a_cut_delays_bytes_and_a_heal_delivers_them_in_order() -> None:
    world = World()
    network, loop = world.network, world.loop
    done: list[tuple[int, float]] = []

    async def client_side() -> None:
        async with world.client() as client:
            await client.add_entry("b", 7, 0, KEY, world.packet(0, -1))
            network.cut.add(frozenset(("east", "west")))
            loop.call_later(1.0, network.cut.clear)
            started = loop.time()

            async def add(entry: int) -> None:
                await client.add_entry("b", 7, entry, KEY, world.packet(entry, entry - 1))
                done.append((entry, loop.time() - started))

            await asyncio.gather(*(add(entry) for entry in range(1, 6)))

    world.run(world.client_host, client_side())
    assert [entry for entry, _ in done] == [1, 2, 3, 4, 5]
    assert all(1.0 <= took < 1.0 + 0.2 + 4 * WAN_S for _, took in done), done


def test_aiohttp_serves_and_calls_between_simulated_hosts() -> None:
    """The proxies are aiohttp applications: they serve on the simulated loop, and a client
    given the SimConnector reaches them over simulated TCP (never over a real socket)."""
    world = World()
    loop = world.loop
    server = loop.add_host("proxy", "west", "127.0.50.9")
    answers: list[tuple[int, object, float]] = []

    async def serve() -> None:
        async def hello(request: web.Request) -> web.Response:
            return web.json_response({"stream": request.match_info["stream"]})

        app = web.Application()
        app.router.add_get("/streams/{stream}", hello)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, server.ip, 8080).start()
        await asyncio.sleep(3600)

    async def call() -> None:
        async with aiohttp.ClientSession(connector=SimConnector()) as http:
            for stream in ("a", "b"):
                started = loop.time()
                async with http.get(f"http://{server.ip}:8080/streams/{stream}") as response:
                    answers.append((response.status, await response.json(), loop.time() - started))
            loop.crash(server)
            with pytest.raises(aiohttp.ClientError):
                async with http.get(f"http://{server.ip}:8080/streams/c") as response:
                    await response.read()

    async def main() -> None:
        loop.spawn(server, serve())
        await asyncio.sleep(0.01)
        await loop.spawn(world.client_host, call())

    run(loop, main())
    assert [(status, body) for status, body, _ in answers] == [
        (200, {"stream": "a"}),
        (200, {"stream": "b"}),
    ]
    first, second = answers[0][2], answers[1][2]
    assert first >= 2 * 2 * WAN_S * 0.7  # a connection, then the request: two round trips
    assert 2 * WAN_S * 0.7 <= second < first  # the connection is reused


def test_a_zookeeper_session_cut_off_suspends_expires_and_comes_back_new() -> None:
    """The simulated store's session as kazoo's and MetaStore's behave: pings unanswered ->
    SUSPENDED; the ensemble expires it after its timeout (its ephemeral node goes); the client
    gives it up two timeouts after the suspension (EXPIRED: it has no isolation check) and, once a server answers again,
    makes a new session (CONNECTED, another id)."""
    loop = SimLoop(5)
    network = Network(loop, loop.rng, {frozenset(pair): 0.02 for pair in _PAIRS})
    ensemble = ZooKeeperEnsemble(loop, network, ["a", "b", "c"])
    client = loop.add_host("client", "c", "127.0.52.1")
    events: list[tuple[str, float]] = []
    seen: dict[str, object] = {}

    async def session_life() -> None:
        store = await SimMetaStore.connect(ensemble, session_timeout_s=3.0)
        subscription = store.session_events()
        first = store.session_id
        await store.create("/lock", ephemeral=True)
        network.cut.update({frozenset(("a", "c")), frozenset(("b", "c"))})  # c alone: no quorum
        cut_at = loop.time()
        async for event in subscription:
            events.append((event.state.value, round(loop.time() - cut_at, 1)))
            if event.state is SessionState.EXPIRED:
                seen["lock while cut"] = ensemble.state.exists("/lock")
                network.cut.clear()
            if event.state is SessionState.CONNECTED:
                break
        seen["new id"] = store.session_id not in (None, first)
        seen["lock after"] = await store.exists("/lock")

    run(loop, loop.spawn(client, session_life()))
    assert [state for state, _ in events] == ["suspended", "expired", "connected"], events
    suspended, expired, _ = (at for _, at in events)
    assert 2.0 <= suspended <= 3.1  # two thirds of the timeout, plus a ping interval
    assert expired - suspended == 6.0  # given up two timeouts after the suspension, as MetaStore
    assert seen == {"lock while cut": None, "new id": True, "lock after": None}
