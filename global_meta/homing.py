"""A session that moved to another region's ZooKeeper node comes back to its own region's.

A process lists its region's nodes first (`core.routes.zk_hosts_for`), so that when its node
stops serving (a cut between its region and the leader's) the session carries over to a node
that still follows the leader. kazoo walks its list from the node that dropped it and starts
again at the top only after the last: a session that moved stays where it went, and after a
session expiry (a paused process) the new session is made on the next node of the list. From
there every read crosses the WAN. Measured on the `realistic` profile: a takeover by a proxy
connected to another region's node took 2.5 s against 0.6-0.7 s from home, and rebuilding a
producer table (a few dozen reads) 2.4 s against 0.25 s. So a session that ended is made
again at home: on its loss, kazoo's next host is the home node (if that refuses it, the walk
goes on where it was).

`Homing` watches where the session is connected. While it is away and a home node serves
(its `srvr` answer names a mode, it follows a leader or leads, and its Zxid has caught up with
the last one this session saw: ZooKeeper refuses a session that has seen more than the node),
it drops the connection at a moment when kazoo has no request queued or waiting for an answer,
with kazoo's next attempt pointed at that node. A drop fails such requests with
ConnectionLoss, as any drop does; one queued between the look and the drop (kazoo's own
threads queue some: a watch recipe's read, a create's missing parent) is failed so, as it could
be by any dropped connection. The store asks a read or an ensure_path failed by a dropped
connection once more (`store.REPEATABLE_OPS`); a write's caller handles it as any lost
connection. The session carries over
(the same id, its ephemeral nodes kept, kazoo's watch recipes re-set their watches). A move
that does not land (home refused or dropped it) goes back to the node it came from and
doubles the wait before the next, up to HOME_WAIT_MAX_S.

It leans on kazoo 2.11's connection handler (its host expansion and its test hook for a
dropped connection), as `store.retry_dropped_logins` does; tests/integration pin the
behaviour on real ZooKeeper.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

from kazoo.client import KazooClient, KazooState
from kazoo.protocol.connection import _CONNECTION_DROP

from global_meta.followers import Follower

log = logging.getLogger(__name__)
HOME_CHECK_S = 1.0  # how often a session away from home looks whether home serves
HOME_WAIT_MAX_S = 30.0  # the longest wait between moves that did not land
SRVR_TIMEOUT_S = 1.0  # the probe's connect and answer, each
# A busy session (a proxy redirecting requests reads ZooKeeper for each) is seldom idle at any
# given instant; between its requests it is, for a WAN round trip at a time from elsewhere.
IDLE_WAIT_S = 1.0  # how long a move looks for an idle moment
IDLE_POLL_S = 0.005
AWAY_SAID_AFTER_S = 5.0  # a session away this long says why it stays
SERVING_MODES = frozenset({"leader", "follower", "observer", "standalone"})

Address = tuple[str, int]  # (host, port) as the connect string names it
HostPort = tuple[str, str, int]  # kazoo's expansion: (host, ip, port)


async def server_mode(
    host: str, port: int, tls: ssl.SSLContext | None, timeout_s: float = SRVR_TIMEOUT_S
) -> str | None:
    """The ZooKeeper server's mode (leader, follower, standalone) from its `srvr` answer
    (over TLS when its port speaks it), or None when it does not serve: a port that accepts
    is not enough, ZooKeeper accepts before it serves and while it looks for a leader."""
    status = await server_status(host, port, tls, timeout_s)
    return None if status is None else status[0]


async def server_status(
    host: str, port: int, tls: ssl.SSLContext | None, timeout_s: float = SRVR_TIMEOUT_S
) -> tuple[str, int] | None:
    """The server's mode and the last transaction id it has applied (`srvr`'s Mode and
    Zxid lines), None when it does not serve."""
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(
                host, port, ssl=tls, server_hostname=host if tls is not None else None
            ),
            timeout_s,
        )
    except (OSError, TimeoutError):
        return None
    try:
        writer.write(b"srvr")
        await writer.drain()
        reply = await asyncio.wait_for(reader.read(4096), timeout_s)
    except (OSError, TimeoutError):
        return None
    finally:
        writer.close()
    fields = dict(
        line.split(":", 1) for line in reply.decode(errors="replace").splitlines() if ":" in line
    )
    if "Mode" not in fields:
        return None
    try:
        zxid = int(fields.get("Zxid", "-1").strip(), 0)
    except ValueError:
        zxid = -1
    return fields["Mode"].strip(), zxid


class _Pass:
    """One pass of kazoo's connect loop over the hosts, which turns to a home node when a
    move asks for it (and, if that node refuses or drops it, back to the node it left)."""

    def __init__(self, hosts: list[HostPort], homing: Homing) -> None:
        self._hosts = hosts
        self._homing = homing

    def __len__(self) -> int:
        return len(self._hosts)

    def __iter__(self) -> Iterator[HostPort]:
        index = 0
        while index < len(self._hosts):
            yield self._hosts[index]
            # the connection to hosts[index] has ended: dropped by a move home, or not
            home = self._homing.take_turn()
            turn = [h for h in self._hosts if (h[0], h[2]) == home] if home else []
            if turn and index > 0:
                yield turn[0]
                continue  # home refused or dropped it: back to the node it came from
            index += 1


class Homing:
    """Brings `client`'s session back to one of `homes` (the first hosts of its ordered
    list) whenever it is connected elsewhere and a home node serves. `start()` on the
    asyncio loop runs it as a supervised follower; `stop()` ends it."""

    def __init__(self, client: KazooClient, homes: list[Address], tls: ssl.SSLContext | None):
        self._client = client
        self.homes = homes
        self._tls = tls
        self._turn: Address | None = None  # read and cleared by kazoo's connection thread
        self._follower = Follower("return to the region's ZooKeeper node", self._run)
        self.moves = 0  # connections dropped to come home
        self.busy_with = ""  # the requests that kept the last look for an idle moment busy
        connection: Any = client._connection
        expand = connection._expand_client_hosts
        connection._expand_client_hosts = lambda: _Pass(expand(), self)
        client.add_listener(self._on_state)

    def _on_state(self, state: KazooState) -> None:
        """A session that ended (a paused process back, a long cut) is made again at home:
        kazoo would make it on whichever node its walk reached, and stay there. Called on
        kazoo's connection thread, before it takes the next host of its pass."""
        if state == KazooState.LOST and self.homes:
            self._turn = self.homes[0]

    def take_turn(self) -> Address | None:
        """The home node a move asked for, once (kazoo's connection thread asks)."""
        turn, self._turn = self._turn, None
        return turn

    def start(self) -> None:
        self._follower.start()

    async def stop(self) -> None:
        await self._follower.stop()

    def connected_to(self) -> tuple[str, int] | None:
        """The (ip, port) the session's connection reaches now, None while it has none."""
        if self._client.state != KazooState.CONNECTED:
            return None
        sock = getattr(self._client._connection, "_socket", None)
        try:
            peer = sock.getpeername() if sock is not None else None
        except OSError:
            return None
        return None if peer is None else (str(peer[0]), int(peer[1]))

    async def at_home(self) -> bool | None:
        """Whether the session is connected to a home node; None while it is not connected."""
        where = self.connected_to()
        if where is None:
            return None
        loop = asyncio.get_running_loop()
        for host, port in self.homes:
            try:
                async with asyncio.timeout(SRVR_TIMEOUT_S):
                    found = await loop.getaddrinfo(host, port)
            except (OSError, TimeoutError):
                continue
            if any((info[4][0], info[4][1]) == where for info in found):
                return True
        return False

    async def serving_home(self) -> Address | None:
        """The first home node that serves now and has applied every transaction this
        session has seen (ZooKeeper refuses a session that has seen more than it), None if
        none does."""
        for host, port in self.homes:
            status = await server_status(host, port, self._tls)
            if status is None or status[0] not in SERVING_MODES:
                continue
            if status[1] >= self._client.last_zxid:
                return host, port
        return None

    def _idle(self) -> bool:
        return not self._client._pending and not self._client._queue

    async def _until_idle(self) -> bool:
        """Whether the session had no request in flight or queued at some instant within
        IDLE_WAIT_S; `busy_with` then names the requests seen in the way."""
        loop = asyncio.get_running_loop()
        until = loop.time() + IDLE_WAIT_S
        seen: Counter[str] = Counter()
        while not self._idle():
            if loop.time() >= until:
                self.busy_with = (
                    ", ".join(f"{what} (in {n} looks)" for what, n in seen.most_common(4))
                    or "no look got through"
                )
                return False
            seen.update(self._in_the_way())
            await asyncio.sleep(IDLE_POLL_S)
        return True

    def _in_the_way(self) -> list[str]:
        """The requests kazoo has in flight or queued, by kind and grandparent path. Its connection
        thread changes both deques meanwhile: a look it disturbed counts nothing."""
        try:
            entries = [*self._client._pending, *self._client._queue]
        except RuntimeError:  # deque mutated during iteration
            return []
        found = []
        for entry in entries:
            path = getattr(entry[0], "path", "") or ""
            found.append(f"{type(entry[0]).__name__} {path.rsplit('/', 2)[0]}")
        return found

    async def _run(self, following: Callable[[], None]) -> None:
        following()
        wait_s = HOME_CHECK_S
        away_since: float | None = None
        said = False  # why it stays away, once per spell away
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(wait_s)
            away = self.connected_to()
            home = await self.at_home()
            if home is None or self.connected_to() != away:
                continue
            if home:
                wait_s, away_since, said = HOME_CHECK_S, None, False
                continue
            if away_since is None:
                away_since = loop.time()
            target = await self.serving_home()
            if target is None or not await self._until_idle():
                if not said and loop.time() - away_since > AWAY_SAID_AFTER_S:
                    said = True
                    why = (
                        "that node does not serve"
                        if target is None
                        else f"never idle (in the way: {self.busy_with})"
                    )
                    log.info(
                        "ZooKeeper session %s away from its region's node for %.1f s: %s",
                        self._session_hex(), loop.time() - away_since, why,
                    )  # fmt: skip
                continue
            if self.connected_to() != away:
                continue  # its connection changed meanwhile: a drop now would hit the new one
            log.info(
                "ZooKeeper session %s moves back to its region's node %s:%d (away %.1f s)",
                self._session_hex(), *target, loop.time() - away_since,
            )  # fmt: skip
            self.moves += 1
            self._turn = target
            self._client._call(_CONNECTION_DROP, self._client.handler.async_result())
            wait_s = min(HOME_WAIT_MAX_S, wait_s * 2)  # reset once home is seen

    def _session_hex(self) -> str:
        client_id = self._client.client_id
        return "none" if client_id is None else hex(int(client_id[0]))
