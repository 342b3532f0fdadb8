"""Homing's pieces without ZooKeeper: the connect loop's pass that turns home on request, and
the `srvr` probe's reading of an answer (the move itself: tests/integration/cluster)."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Iterator
from typing import Any

import pytest
from kazoo.client import KazooClient, KazooState
from kazoo.protocol.serialization import GetChildren, Sync

from global_meta import homing
from global_meta.homing import Address, _Pass, server_mode, server_status

HOSTS = [("home", "10.0.0.1", 2181), ("east", "10.0.0.2", 2181), ("west", "10.0.0.3", 2181)]


class Turns:
    """The homing side of a pass: a turn home asked for, taken once."""

    def __init__(self) -> None:
        self.turn: Address | None = None

    def take_turn(self) -> Address | None:
        turn, self.turn = self.turn, None
        return turn


def test_a_pass_without_a_turn_is_the_list_in_order() -> None:
    assert list(_Pass(HOSTS, Turns())) == HOSTS
    assert len(_Pass(HOSTS, Turns())) == 3


def test_a_turn_asked_while_away_goes_home_next_then_back_where_it_was() -> None:
    turns = Turns()
    walk = iter(_Pass(HOSTS, turns))
    assert next(walk) == HOSTS[0]
    assert next(walk) == HOSTS[1]  # the home node dropped it: connected to east
    turns.turn = ("home", 2181)  # homing drops the connection, asking for home
    assert next(walk) == HOSTS[0]
    assert turns.turn is None, "the turn is taken once"
    assert next(walk) == HOSTS[1]  # home refused it: back to east, where it came from
    assert next(walk) == HOSTS[2]
    assert list(walk) == []


def test_a_turn_to_a_host_not_in_the_list_is_ignored() -> None:
    turns = Turns()
    walk = iter(_Pass(HOSTS, turns))
    next(walk)
    turns.turn = ("elsewhere", 2181)
    assert list(walk) == HOSTS[1:]


async def answering(reply: bytes) -> tuple[asyncio.Server, int]:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(4)
        writer.write(reply)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def test_the_probe_reads_the_mode_and_zxid_of_a_serving_node() -> None:
    server, port = await answering(
        b"Zookeeper version: 3.9.5\nLatency min/avg/max: 0/0/0\nZxid: 0x10000017b\n"
        b"Mode: follower\nNode count: 42\n"
    )
    async with server:
        assert await server_mode("127.0.0.1", port, None) == "follower"
        assert await server_status("127.0.0.1", port, None) == ("follower", 0x10000017B)


async def test_a_node_looking_for_a_leader_is_not_serving() -> None:
    server, port = await answering(b"This ZooKeeper instance is not currently serving requests\n")
    async with server:
        assert await server_mode("127.0.0.1", port, None) is None


async def test_a_node_that_never_answers_is_not_serving_within_the_bound() -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # reads the question, answers nothing, until the probe hangs up
        writer.close()

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        async with asyncio.timeout(2.0):
            assert await server_mode("127.0.0.1", port, None, timeout_s=0.2) is None


class Disturbed(deque[Any]):
    """A deque that kazoo's connection thread changes while it is read."""

    def __iter__(self) -> Iterator[Any]:
        raise RuntimeError("deque mutated during iteration")


async def test_a_busy_session_names_the_requests_in_the_way_and_survives_a_disturbed_look(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(homing, "IDLE_WAIT_S", 0.05)
    client = KazooClient(hosts="127.0.0.1:9")  # never connected: only its deques are read
    watcher = homing.Homing(client, [("127.0.0.1", 9)], None)
    client._queue.append((GetChildren("/globelog/ns/streams/s/lock", None), None))
    client._pending.append((Sync("/globelog/ns/streams/s/lock"), None, 1))
    assert not await watcher._until_idle()
    kinds = {part.rsplit(" (in ", 1)[0] for part in watcher.busy_with.split(", ")}
    assert kinds == {
        "Sync /globelog/ns/streams",
        "GetChildren /globelog/ns/streams",
    }  # grandparents
    client._pending = Disturbed(client._pending)
    assert watcher._in_the_way() == []  # that look counts nothing; the next one will
    client._pending.clear()
    client._queue.clear()
    assert await watcher._until_idle()


def test_a_session_that_ended_is_made_again_at_home_not_where_the_walk_was() -> None:
    client = KazooClient(hosts="home:2181,east:2181,west:2181")  # never connected
    watcher = homing.Homing(client, [("home", 2181)], None)
    walk = iter(_Pass(HOSTS, watcher))
    assert next(walk) == HOSTS[0]
    assert next(walk) == HOSTS[1]  # the home connection broke (a paused process): east
    assert watcher._on_state in client.state_listeners
    watcher._on_state(KazooState.SUSPENDED)  # a drop alone asks nothing
    watcher._on_state(KazooState.LOST)  # east says the session expired
    assert next(walk) == HOSTS[0], "the new session is made at home"
    assert next(walk) == HOSTS[1]  # home refused it too: the walk goes on where it was
    assert next(walk) == HOSTS[2]
