"""The simulated ZooKeeper ensemble, and the metadata store globelog's real code uses over it.

`ZooKeeperEnsemble` is one ZooKeeper server per region over one znode state (`SimZooKeeper`, held to a
real ensemble by the contract tests). It serves a client whose region reaches a majority of
the servers that are up, expires sessions not heard from within their timeout (their
ephemeral nodes go, and watchers hear of it), and tells watchers of every change.

`SimMetaStore` has `global_meta.MetaStore`'s API (the calls the drivers, writers, readers and
ownership make) with its errors, and behaves as a kazoo-backed store does: each operation
takes a round trip to the nearest serving server (writes and syncs one more to the leader);
without a serving server it waits, and fails MetadataUnavailableError after its operation
timeout; its session is kept alive by pings, goes SUSPENDED when pings go unanswered, and is
learnt EXPIRED when a server answers again after the ensemble expired it (a new session is
made at once, as kazoo does). Like MetaStore, it gives a session up itself after
`give_up_after_s` without a server (asking `isolation_check` first).
Data may be any value; the real code stores bytes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import (
    AsyncGenerator,
    Awaitable,
    Callable,
    Collection,
    Iterable,
    Iterator,
    Sequence,
)
from typing import Any, TypeVar

from core import errors
from global_meta.store import (
    ISOLATION_CHECK_TIMEOUT_S,
    NodeStat,
    Op,
    SessionEvent,
    SessionEvents,
    SessionState,
    give_up_after_s,
    isolation_check_lead_s,
)
from verify.sim.io.loop import Host, SimLoop, current_host
from verify.sim.io.network import Network
from verify.sim.zookeeper import SimZooKeeper

log = logging.getLogger(__name__)

T = TypeVar("T")
# ZooKeeper expires sessions at its ticks (the local cluster's tickTime, localcluster/plan.py):
# a session dies up to a tick after its timeout
EXPIRY_TICK_S = 0.2
POLL_S = 0.05  # how often a waiting operation looks for a serving server again


class ZooKeeperEnsemble:
    """The ZooKeeper ensemble of a simulation: one server in each of `regions`."""

    def __init__(self, loop: SimLoop, network: Network, regions: Sequence[str]) -> None:
        self.loop = loop
        self.network = network
        self.regions = sorted(regions)
        self.down: set[str] = set()  # regions whose server is down
        self.state = SimZooKeeper()
        self._servers = {
            r: Host(f"zk-{r}", r, f"127.0.200.{i + 1}") for i, r in enumerate(self.regions)
        }
        self._watchers: dict[str, list[Callable[[], None]]] = {}  # path -> who watches it
        self._had_quorum = True
        self.operations = 0
        loop.call_later(EXPIRY_TICK_S, self._expire)

    # -- who is served -----------------------------------------------------------------------

    def serving(self, region: str) -> list[str]:
        """The servers up that a client in `region` reaches, if they are a majority (else none):
        nearest first."""
        reached = [
            r
            for r in self.regions
            if r not in self.down
            and self.network.reachable(self._host_in(region), self._servers[r])
        ]
        if len(reached) * 2 <= len(self.regions):
            return []
        return sorted(reached, key=lambda r: (r != region, r))

    def _host_in(self, region: str) -> Host:
        return self._servers.get(region) or Host("client", region, "")

    def round_trip_s(self, region: str, server: str, write: bool) -> float:
        client = self._host_in(region)
        there = self._servers[server]
        trip = self.network.latency_s(client, there) + self.network.latency_s(there, client)
        if write:
            leader = self._servers[self.serving(server)[0] if server else server]
            trip += self.network.latency_s(there, leader) + self.network.latency_s(leader, there)
        return trip

    # -- the state, and those watching it --------------------------------------------------

    def apply(self, action: Callable[[SimZooKeeper], T], touches: Collection[str] = ()) -> T:
        """`action` on the znode state now; the watchers of each path it `touches` (a node
        made, set or deleted, and its parent) hear of it."""
        self.state.now_s = self.loop.time()
        self.operations += 1
        result = action(self.state)
        if touches:
            self.changed(touches)
        return result

    def watch(self, path: str, notify: Callable[[], None]) -> Callable[[], None]:
        """Calls `notify` whenever `path` or one of its children changes; returns the undo."""
        self._watchers.setdefault(path, []).append(notify)

        def stop() -> None:
            listed = self._watchers.get(path, [])
            if notify in listed:
                listed.remove(notify)
            if not listed:
                self._watchers.pop(path, None)

        return stop

    def changed(self, paths: Collection[str]) -> None:
        for path in sorted(set(paths)):
            for notify in list(self._watchers.get(path, ())):
                notify()

    def end_session(self, session: int) -> None:
        """The session ends (closed, or expired): its ephemeral nodes go, watchers hear."""
        gone = self.state.ephemerals_of(session)
        self.apply(lambda zk: zk.close_session(session), touches=_with_parents(gone))

    def _expire(self) -> None:
        self.loop.call_later(EXPIRY_TICK_S, self._expire)
        self.state.now_s = self.loop.time()
        quorum = any(self.serving(r) for r in self.regions)
        if quorum and not self._had_quorum:
            self.state.refresh_sessions()  # a new leader gives every session a fresh timeout
        self._had_quorum = quorum
        if quorum:
            for session in self.state.silent_sessions():
                self.end_session(session)


class SimMetaStore:
    """A metadata store of the host that makes it (see the module's doc)."""

    def __init__(
        self,
        ensemble: ZooKeeperEnsemble,
        *,
        op_timeout_s: float = 5.0,
        session_timeout_s: float = 4.0,
    ) -> None:
        host = current_host()
        assert host is not None, "a store belongs to a simulated host: make it in its code"
        self._host: Host = host
        self._ensemble = ensemble
        self._op_timeout_s = op_timeout_s
        self._session_timeout_s = session_timeout_s
        self._session: int | None = None
        self._state = SessionState.SUSPENDED
        self._last_heard_s = 0.0
        self._subscribers: list[SessionEvents] = []
        self._pinger: asyncio.Task[None] | None = None
        self._closing = False
        self._abandon_timer: asyncio.TimerHandle | None = None
        self._give_up_at = 0.0
        self._suspensions = 0
        self.isolation_check: Callable[[], Awaitable[bool]] | None = None
        self.login = None

    @classmethod
    async def connect(cls, ensemble: ZooKeeperEnsemble, **options: float) -> SimMetaStore:
        store = cls(ensemble, **options)
        await store._open_session()
        store._pinger = asyncio.get_running_loop().create_task(store._ping(), name="zk-ping")
        return store

    async def close(self) -> None:
        self._closing = True
        if self._pinger is not None:
            self._pinger.cancel()
        if self._session is not None and self._served():
            session = self._session
            self._ensemble.end_session(session)
        self._session = None

    async def __aenter__(self) -> SimMetaStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def session_id(self) -> int | None:
        return self._session

    @property
    def hosts(self) -> str:
        return ",".join(self._ensemble.regions)

    # -- sessions ------------------------------------------------------------------------------

    def session_events(self) -> SessionEvents:
        subscription = SessionEvents()
        self._subscribers.append(subscription)
        return subscription

    def _publish(self, state: SessionState) -> None:
        self._state = state
        if state is SessionState.SUSPENDED and self._abandon_timer is None:
            checked = self.isolation_check is not None
            give_up_s = give_up_after_s(self._session_timeout_s, checked)
            loop = asyncio.get_running_loop()
            self._suspensions += 1
            self._give_up_at = loop.time() + give_up_s
            self._abandon_timer = loop.call_later(
                give_up_s - isolation_check_lead_s(give_up_s, checked), self._give_up
            )
        elif state is not SessionState.SUSPENDED and self._abandon_timer is not None:
            self._abandon_timer.cancel()
            self._abandon_timer = None
        event = SessionEvent(state, self._session)
        self._subscribers = [s for s in self._subscribers if not s.closed]
        for subscription in self._subscribers:
            subscription.deliver(event)

    def _served(self) -> list[str]:
        return self._ensemble.serving(self._host.region)

    async def _open_session(self) -> None:
        await self._call("connect", "/", lambda zk: None, write=True)
        self._session = self._ensemble.apply(lambda zk: zk.open_session(self._session_timeout_s))
        self._last_heard_s = asyncio.get_running_loop().time()
        self._publish(SessionState.CONNECTED)

    async def _ping(self) -> None:
        loop = asyncio.get_running_loop()
        interval = self._session_timeout_s / 3
        while True:
            await asyncio.sleep(interval)
            if self._served():
                await asyncio.sleep(
                    self._ensemble.round_trip_s(self._host.region, self._served()[0], False)
                )
                session = self._session
                if session is not None and self._ensemble.state.session_alive(session):
                    self._ensemble.apply(_heard_from(session))
                    self._last_heard_s = loop.time()
                    if self._state is not SessionState.CONNECTED:
                        self._publish(SessionState.CONNECTED)
                    continue
                if session is not None:  # the ensemble expired it while this client was away
                    self._session = None
                    self._publish(SessionState.EXPIRED)
                await self._open_session()  # a new session, as kazoo makes one (or after a give-up)
            elif (
                self._state is SessionState.CONNECTED
                and loop.time() - self._last_heard_s > self._session_timeout_s * 2 / 3
            ):
                self._publish(SessionState.SUSPENDED)

    def _give_up(self) -> None:
        self._abandon_timer = None
        if self._closing or self._state is not SessionState.SUSPENDED:
            return
        asyncio.get_running_loop().create_task(self._check_then_give_up())

    async def _check_then_give_up(self) -> None:
        suspension = self._suspensions
        cut_off = True
        if self.isolation_check is not None:
            try:
                async with asyncio.timeout(ISOLATION_CHECK_TIMEOUT_S):
                    cut_off = await self.isolation_check()
            except Exception:  # noqa: BLE001 - as MetaStore: a failed check counts as cut off
                cut_off = True
        if cut_off:  # as MetaStore: the check ran ahead of the give-up time, not before it
            loop = asyncio.get_running_loop()
            await asyncio.sleep(max(0.0, self._give_up_at - loop.time()))
        if (
            self._closing
            or self._state is not SessionState.SUSPENDED
            or suspension != self._suspensions  # as MetaStore: answers for its suspension only
        ):
            return
        if cut_off:
            self._session = None
            self._publish(SessionState.EXPIRED)  # a new session comes with a server
        else:
            self._abandon_timer = asyncio.get_running_loop().call_later(
                self._session_timeout_s, self._give_up
            )

    # -- operations ----------------------------------------------------------------------------

    async def _call(
        self,
        operation: str,
        path: str,
        action: Callable[[SimZooKeeper], T],
        *,
        write: bool,
        touches: Collection[str] = (),
    ) -> T:
        """`action` applied at the ensemble after half a round trip to the nearest serving
        server (waiting for one for up to the operation timeout), answered after the rest."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._op_timeout_s
        while not (served := self._served()):
            if loop.time() >= deadline:
                raise errors.MetadataUnavailableError(f"{operation} {path!r}: no answer in time")
            await asyncio.sleep(POLL_S)
        trip = self._ensemble.round_trip_s(self._host.region, served[0], write)
        await asyncio.sleep(trip / 2)
        session = self._session
        if operation != "connect" and (
            session is None or not self._ensemble.state.session_alive(session)
        ):
            await asyncio.sleep(trip / 2)
            raise errors.SessionExpiredError(
                f"{operation} {path!r}: the session of {self._host.name} expired"
            )
        try:
            return self._ensemble.apply(action, touches)
        finally:
            await asyncio.sleep(trip / 2)

    async def create(
        self,
        path: str,
        data: bytes = b"",
        *,
        ephemeral: bool = False,
        sequential: bool = False,
        make_parents: bool = False,
    ) -> str:
        def create(zk: SimZooKeeper) -> str:
            owner = self._session if ephemeral else None
            return zk.create(
                path, data, session=owner, sequential=sequential, make_parents=make_parents
            )

        return await self._call("create", path, create, write=True, touches=(path, _parent(path)))

    async def sync(self, path: str) -> None:
        await self._call("sync", path, lambda zk: None, write=True)

    async def ensure_path(self, path: str) -> None:
        def ensure(zk: SimZooKeeper) -> None:
            if zk.exists(path) is None:
                zk.create(path, b"", make_parents=True)

        await self._call("ensure_path", path, ensure, write=True, touches=_with_parents([path]))

    async def get(self, path: str) -> tuple[bytes, NodeStat]:
        data, stat = await self._call("get", path, lambda zk: zk.get(path), write=False)
        return data, stat

    async def get_many(self, paths: Sequence[str]) -> list[tuple[bytes, NodeStat] | None]:
        def read(zk: SimZooKeeper) -> list[tuple[bytes, NodeStat] | None]:
            return [zk.get(p) if zk.exists(p) is not None else None for p in paths]

        return await self._call("get_many", ",".join(paths[:1]), read, write=False)

    async def exists(self, path: str) -> NodeStat | None:
        return await self._call("exists", path, lambda zk: zk.exists(path), write=False)

    async def children(self, path: str) -> list[str]:
        return await self._call("children", path, lambda zk: zk.children(path), write=False)

    async def set(self, path: str, data: bytes, *, version: int) -> NodeStat:
        def set_data(zk: SimZooKeeper) -> NodeStat:
            return zk.set(path, data, version=version)

        return await self._call("set", path, set_data, write=True, touches=(path,))

    async def delete(self, path: str, *, version: int, recursive: bool = False) -> None:
        gone: list[str] = []

        def delete(zk: SimZooKeeper) -> None:
            if recursive:
                for child in zk.children(path):
                    delete_tree(zk, f"{path}/{child}", gone)
            zk.delete(path, version=version)
            gone.append(path)

        await self._call("delete", path, delete, write=True, touches=_TouchedBy(gone))

    async def commit(self, ops: Sequence[Op]) -> list[str | NodeStat | bool]:
        session = self._session
        touched = _with_parents(op.path for op in ops if op.kind != "check")
        return await self._call(
            "commit",
            ops[0].path if ops else "",
            lambda zk: zk.commit(ops, session=session),
            write=True,
            touches=touched,
        )

    # -- watches -------------------------------------------------------------------------------

    async def watch_data(self, path: str) -> AsyncGenerator[tuple[bytes, NodeStat] | None, None]:
        """The node's (data, stat) now and after each change; None while it is absent."""
        async for value in self._watch("watch_data", path, lambda zk: _data_or_none(zk, path)):
            yield value

    async def watch_children(self, path: str) -> AsyncGenerator[list[str], None]:
        """The sorted child names now and after each change; NoNodeError when the node is
        missing or deleted (even if made again)."""
        created: list[int] = []

        def read(zk: SimZooKeeper) -> list[str]:
            stat = zk.exists(path)
            if stat is None or (created and stat.created_ms != created[0]):
                raise errors.NoNodeError(
                    f"watch_children {path!r}: no such node (or it was deleted)"
                )
            created[:1] = [stat.created_ms]
            return zk.children(path)

        async for value in self._watch("watch_children", path, read):
            yield value

    async def _watch(
        self, operation: str, path: str, read: Callable[[SimZooKeeper], T]
    ) -> AsyncGenerator[T, None]:
        if self._state is not SessionState.CONNECTED:
            raise errors.MetadataUnavailableError(
                f"{operation} {path!r}: not connected to ZooKeeper"
            )
        changed = asyncio.Event()
        stop = self._ensemble.watch(path, changed.set)
        try:
            last: Any = _UNSEEN
            while True:
                changed.clear()
                value = await self._call(operation, path, read, write=False)
                if value != last:
                    last = value
                    yield value
                await changed.wait()
        finally:
            stop()


_UNSEEN = object()


def _heard_from(session: int) -> Callable[[SimZooKeeper], None]:
    return lambda zk: zk.heard_from(session)


def _data_or_none(zk: SimZooKeeper, path: str) -> tuple[bytes, NodeStat] | None:
    return zk.get(path) if zk.exists(path) is not None else None


def delete_tree(zk: SimZooKeeper, path: str, gone: list[str]) -> None:
    for child in zk.children(path):
        delete_tree(zk, f"{path}/{child}", gone)
    zk.delete(path, version=-1)
    gone.append(path)


def _parent(path: str) -> str:
    return path.rsplit("/", 1)[0] or "/"


def _with_parents(paths: Iterable[str]) -> set[str]:
    return {p for path in paths for p in (path, _parent(path))}


class _TouchedBy(Collection[str]):
    """The paths a recursive delete removed (and their parents), known once it ran."""

    def __init__(self, gone: list[str]) -> None:
        self._gone = gone

    def _paths(self) -> set[str]:
        return _with_parents(self._gone)

    def __contains__(self, path: object) -> bool:
        return path in self._paths()

    def __iter__(self) -> Iterator[str]:
        return iter(self._paths())

    def __len__(self) -> int:
        return len(self._paths())
