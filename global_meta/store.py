"""MetaStore: asyncio coroutines, async watches and session events over one kazoo client."""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import ssl
import threading
import weakref
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    AuthFailedError,
    ConnectionClosedError,
    ConnectionDropped,
    ConnectionLoss,
    KazooException,
    RolledBackError,
    SessionClosedRequireSaslError,
)
from kazoo.exceptions import (
    NoNodeError as ZkNoNodeError,
)
from kazoo.exceptions import (
    NotEmptyError as ZkNotEmptyError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import KeeperState, ZnodeStat
from kazoo.security import make_acl

from core import errors
from core.routes import zk_hosts_for
from core.security.pki import client_context, mutual_context
from core.security.secrets import ZkLogin, ZkTls, zk_login
from core.topology import Topology
from global_meta.errors import translate
from global_meta.homing import Homing
from global_meta.watch import Mailbox

T = TypeVar("T")
log = logging.getLogger(__name__)
ANY_VERSION = -1  # explicit opt-out of compare-and-set; every globelog update names a version
RECURSIVE_DELETE_WALKS = 3  # a recursive delete that met creates under its tree
GET_MANY_CHUNK = 500  # reads one get_many sends at once (and waits for within the op timeout)
SESSION_EVENTS_MAX = 64  # buffered session events per subscriber; older ones are dropped
# A client without any server for a session timeout gives its session up: by then the
# ensemble has expired it, unless a leader election left every server not serving for a while
# (after which sessions carry on). An isolation check tells the two apart: it starts
# ISOLATION_CHECK_LEAD_S before the give-up, so its answer is there when the time is up. A
# store without one waits two timeouts: the local cluster's elections take 1.3-2.3 s, and its
# 1.5 s sessions would otherwise be given up at each.
GIVE_UP_AFTER_SESSIONS = 1
GIVE_UP_UNCHECKED_AFTER_SESSIONS = 2
ISOLATION_CHECK_TIMEOUT_S = 3.0
ISOLATION_CHECK_LEAD_S = 0.75
# operations asked once more when a dropped connection failed them (repeating them is safe)
REPEATABLE_OPS = frozenset({"sync", "ensure_path", "get", "exists", "children"})


def give_up_after_s(session_timeout_s: float, checked: bool) -> float:
    """How long a store stays without a server before it gives its session up."""
    sessions = GIVE_UP_AFTER_SESSIONS if checked else GIVE_UP_UNCHECKED_AFTER_SESSIONS
    return sessions * session_timeout_s


def isolation_check_lead_s(give_up_s: float, checked: bool) -> float:
    """How long before the give-up the isolation check starts."""
    return min(ISOLATION_CHECK_LEAD_S, give_up_s / 2) if checked else 0.0


ENSEMBLE_CONFIG_ZNODE = "/zookeeper/config"  # ZooKeeper's own record of its members


def kazoo_login(login: ZkLogin | None, tls: ZkTls | None = None) -> dict[str, Any]:
    """KazooClient options of a session as `login`: SASL DIGEST-MD5, and every znode it
    creates readable and writable by that user only (kazoo's default would be world-open);
    TLS to ZooKeeper's port (the login's, or `tls`: an anonymous session's), the server's
    certificate verified for the host dialled."""
    options: dict[str, Any] = {}
    tls = login.tls if login is not None else tls
    if tls is not None:
        options.update(use_ssl=True, ca=str(tls.ca), verify_certs=True, check_hostname=True)
        if tls.cert is not None and tls.key is not None:
            options.update(certfile=str(tls.cert), keyfile=str(tls.key))
    if login is not None:
        options["sasl_options"] = {
            "mechanism": "DIGEST-MD5",
            "username": login.user,
            "password": login.password,
        }
        options["default_acl"] = [make_acl("sasl", login.user, all=True)]
    return options


def retry_dropped_logins(client: KazooClient) -> threading.Event:
    """Two corrections to kazoo 2.11's SASL login. A connection that drops in the middle of
    the exchange is a dropped connection to retry, as any other (kazoo takes it for a refused
    login and gives its session up for good: a relay or a server going away at that moment
    would end a proxy's ownership). A login the server refuses (it answers that the session
    requires one) ends the client's attempts, as a refused login should, instead of killing
    kazoo's connection thread with an error it does not expect there. Returns an event set
    once a server has refused the login: kazoo's own state moves on to CLOSED right after, and
    a `start` that wakes late sees only a session that never came."""
    refused = threading.Event()
    connection = client._connection
    authenticate = connection._authenticate_with_sasl

    def authenticate_or_drop(host: str, timeout: float) -> None:
        try:
            authenticate(host, timeout)
        except AuthFailedError as err:
            if isinstance(err.__cause__, ConnectionDropped):
                raise ConnectionDropped(f"dropped during the SASL login to {host}") from err
            refused.set()
            raise
        except SessionClosedRequireSaslError as err:
            refused.set()
            raise AuthFailedError(f"{host} refused the SASL login") from err

    connection._authenticate_with_sasl = authenticate_or_drop
    return refused


def _probe_tls(login: ZkLogin | None) -> ssl.SSLContext | None:
    """What a probe of a node's `srvr` speaks: TLS as the session's connection does."""
    tls = None if login is None else login.tls
    if tls is None:
        return None
    if tls.cert is None or tls.key is None:
        return client_context(tls.ca)
    return mutual_context(tls.ca, tls.cert, tls.key)


def _discard(client: KazooClient) -> None:
    """Stops a client that got no session (its connection thread may still be running) and
    releases its resources."""
    client.stop()
    client.close()


def _logged_in(client: KazooClient, timeout_s: float) -> None:
    """Returns once a request of the session has been served (so its login went through);
    AuthFailedError when the login was refused."""
    try:
        client.exists_async("/").get(timeout=timeout_s)
    except ConnectionClosedError:
        # A request queued before the refusal is failed as the connection closes, not with
        # the refusal itself; the client's state says which it was (set before the close).
        if client.client_state == KeeperState.AUTH_FAILED:
            raise AuthFailedError("the SASL login was refused") from None
        raise


class SessionState(enum.Enum):
    CONNECTED = "connected"
    SUSPENDED = "suspended"  # connection lost; the session may still be alive
    EXPIRED = "expired"  # the session is gone with its ephemeral nodes and watches


@dataclass(frozen=True, slots=True)
class SessionEvent:
    state: SessionState
    session_id: int | None


@dataclass(frozen=True, slots=True)
class EnsembleConfig:
    """ZooKeeper's dynamic configuration: each voting member's server spec by its id."""

    servers: dict[int, str]  # id -> "host:peer:election:role;client"
    version: str  # hex, as ZooKeeper writes it

    @classmethod
    def parse(cls, data: bytes) -> EnsembleConfig:
        servers: dict[int, str] = {}
        version = ""
        for line in data.decode(errors="replace").splitlines():
            key, _, value = line.strip().partition("=")
            if key.startswith("server.") and key[7:].isdigit():
                servers[int(key[7:])] = value
            elif key == "version":
                version = value
        return cls(servers, version)

    def host_of(self, server_id: int) -> str:
        return self.servers[server_id].split(":", 1)[0]


@dataclass(frozen=True, slots=True)
class NodeStat:
    """The parts of a znode's stat globelog uses; `version` is the CAS token."""

    version: int
    children_version: int
    created_ms: int
    modified_ms: int
    ephemeral_owner: int
    children: int
    data_bytes: int

    @staticmethod
    def of(stat: ZnodeStat) -> NodeStat:
        return NodeStat(
            stat.version,
            stat.cversion,
            stat.ctime,
            stat.mtime,
            stat.ephemeralOwner,
            stat.numChildren,
            stat.dataLength,
        )


@dataclass(frozen=True, slots=True)
class Op:
    """One operation of an atomic multi-op (`MetaStore.commit`)."""

    kind: str  # "create" | "set" | "delete" | "check"
    path: str
    data: bytes = b""
    version: int = ANY_VERSION
    ephemeral: bool = False


class SessionEvents:
    """A subscription to a store's session state changes, from the moment it is made (so a
    caller can subscribe, then read the session, and miss nothing in between). Iterate it for
    each later change; the newest SESSION_EVENTS_MAX not yet taken are kept (an older one is
    stale anyway). It ends with `aclose()`, with a cancelled wait (as an async generator's
    would), or when dropped: the store holds its subscriptions weakly."""

    def __init__(self) -> None:
        self._queue: asyncio.Queue[SessionEvent] = asyncio.Queue(SESSION_EVENTS_MAX)
        self.closed = False

    def deliver(self, event: SessionEvent) -> None:
        if self.closed:
            return
        if self._queue.full():
            self._queue.get_nowait()  # keep the newest states
        self._queue.put_nowait(event)

    def __aiter__(self) -> SessionEvents:
        return self

    async def __anext__(self) -> SessionEvent:
        if self.closed:
            raise StopAsyncIteration
        try:
            return await self._queue.get()
        except BaseException:
            self.closed = True
            raise

    async def aclose(self) -> None:
        self.closed = True


class MetaStore:
    """The one asyncio adapter over ZooKeeper. Create with `await MetaStore.connect(...)`."""

    def __init__(
        self,
        client: KazooClient,
        loop: asyncio.AbstractEventLoop,
        op_timeout_s: float,
        session_timeout_s: float = 10.0,
        login: ZkLogin | None = None,
        homing: Homing | None = None,
    ):
        self._client = client
        self.login = login
        self.homing = homing  # brings a session that moved to another region's node back
        self._loop = loop
        self._op_timeout_s = op_timeout_s
        self._session_timeout_s = session_timeout_s
        self._subscribers: weakref.WeakSet[SessionEvents] = weakref.WeakSet()
        self._abandon_timer: asyncio.TimerHandle | None = None
        self._suspended_at = 0.0  # loop time: the last suspension began
        self._give_up_at = 0.0  # loop time: when a suspended session is given up
        self._suspensions = 0  # counts them, so a check answers for its own suspension only
        self._replacing: asyncio.Task[None] | None = None
        self._without_session = False  # the session was given up; no new one connected yet
        # Asked before giving a session up: True when this process is cut off from most of
        # the cluster (an isolation), False when only ZooKeeper is away (an election, which
        # the session survives). None: give up on time alone.
        self.isolation_check: Callable[[], Awaitable[bool]] | None = None
        self._checking: asyncio.Task[None] | None = None
        self._closing = False
        client.add_listener(self._on_state)
        if homing is not None:
            homing.start()

    @classmethod
    async def connect(
        cls,
        hosts: str,
        login: ZkLogin | None,
        *,
        session_timeout_s: float = 10.0,
        connect_timeout_s: float = 15.0,
        op_timeout_s: float = 10.0,
        ordered: bool = False,
        home: int = 0,
    ) -> MetaStore:
        """Connects to `hosts` (a ZooKeeper connect string, optionally with a chroot) as
        `login`, whose user alone may read and write the znodes this store creates; None is
        an anonymous session, which the deployment's ZooKeeper refuses (a test's intruder).
        `ordered`: the hosts are tried in their order (a dropped connection moves on to the
        next, and after the last the list starts again at the top), else in a random order,
        spreading clients over the ensemble. `home` (ordered only): the first `home` hosts
        are this process's region's; a session connected elsewhere comes back to one of them
        once it serves (global_meta.homing)."""
        client = KazooClient(
            hosts=hosts,
            timeout=session_timeout_s,
            randomize_hosts=not ordered,
            connection_retry={"max_tries": -1, "max_delay": 1.0},
            **kazoo_login(login),
        )
        refused = retry_dropped_logins(client)
        homing = None
        if ordered and home > 0:
            homing = Homing(client, list(client.hosts)[:home], _probe_tls(login))
        who = "anonymously" if login is None else f"as {login.user!r}"
        try:
            await asyncio.to_thread(client.start, connect_timeout_s)
            if login is not None:  # kazoo reports a session before the login is done
                await asyncio.to_thread(_logged_in, client, connect_timeout_s)
        except (AuthFailedError, KazooTimeoutError, KazooException) as err:
            await asyncio.to_thread(_discard, client)
            if isinstance(err, AuthFailedError) or refused.is_set():
                raise errors.ConfigError(
                    f"ZooKeeper {hosts!r} refused a login {who}: its nodes "
                    "were started with another secret than this process's (`security.dir`, "
                    "zookeeper.password and zookeeper.jaas; docs/security.md)"
                ) from err
            raise errors.MetadataUnavailableError(
                f"connect to ZooKeeper {hosts!r} {who}: no session within {connect_timeout_s} s"
            ) from err
        return cls(
            client, asyncio.get_running_loop(), op_timeout_s, session_timeout_s, login, homing
        )

    @classmethod
    async def of(
        cls,
        topology: Topology,
        region: str | None = None,
        *,
        session_timeout_s: float = 10.0,
        connect_timeout_s: float = 15.0,
        op_timeout_s: float = 10.0,
    ) -> MetaStore:
        """A session with the topology's ensemble, logged in with the deployment's ZooKeeper
        secret; from `region`, with its own region's nodes first (`routes.zk_hosts_for`)."""
        login = zk_login(topology.security)
        ordered = region is not None
        hosts = topology.zk_connect if region is None else zk_hosts_for(topology, region)
        return await cls.connect(
            hosts,
            login,
            session_timeout_s=session_timeout_s,
            connect_timeout_s=connect_timeout_s,
            op_timeout_s=op_timeout_s,
            ordered=ordered,
            home=0 if region is None else len(topology.zk_nodes_for(region)),
        )

    @classmethod
    @contextlib.asynccontextmanager
    async def second_if(
        cls, wanted: bool, topology: Topology, region: str, session_timeout_s: float
    ) -> AsyncIterator[MetaStore | None]:
        """When `wanted`, a second session (`of`) for the block, closed after it; else None.
        A write proxy's, which nothing writes through: a take's early read does not queue
        behind the writes of the proxy's other takes (region/ownership.py)."""
        if not wanted:
            yield None
            return
        async with await cls.of(topology, region, session_timeout_s=session_timeout_s) as store:
            yield store

    async def close(self) -> None:
        """Ends the session (its ephemeral nodes go) and releases the kazoo threads."""
        self._closing = True
        if self._abandon_timer is not None:
            self._abandon_timer.cancel()
        if self._checking is not None:
            self._checking.cancel()
        if self._replacing is not None:
            await asyncio.wait({self._replacing}, timeout=self._op_timeout_s)
        try:
            if self.homing is not None:
                await self.homing.stop()
        finally:
            await asyncio.to_thread(self._client.stop)
        await asyncio.to_thread(self._client.close)

    async def __aenter__(self) -> MetaStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def session_id(self) -> int | None:
        client_id = self._client.client_id
        return None if client_id is None else int(client_id[0])

    @property
    def session_credentials(self) -> tuple[int, bytes] | None:
        """(session id, password); fault tools use it to expire the session from outside."""
        client_id = self._client.client_id
        return None if client_id is None else (int(client_id[0]), bytes(client_id[1]))

    @property
    def hosts(self) -> str:
        return ",".join(f"{h}:{p}" for h, p in self._client.hosts)

    # -- operations -------------------------------------------------------------------------

    async def _await(self, operation: str, path: str, start: Callable[[], Any]) -> Any:
        try:
            return await self._await_once(operation, path, start)
        except errors.MetadataUnavailableError as err:
            # A dropped connection is not a lost session: kazoo connects again and the
            # session goes on. A read or an ensure_path it failed is asked once more (safe to
            # repeat; the second try has its own op timeout). Drops come with a move home
            # (homing drops at an idle instant, but kazoo's own threads can queue a request
            # in between: a watch recipe's read, a create's missing parent) and with a node
            # that stops serving; proxies starting up failed their start on them.
            if not (operation in REPEATABLE_OPS and isinstance(err.__cause__, ConnectionLoss)):
                raise
            return await self._await_once(operation, path, start)

    async def _await_once(self, operation: str, path: str, start: Callable[[], Any]) -> Any:
        future: asyncio.Future[Any] = self._loop.create_future()

        def settle(result: Any) -> None:
            def deliver() -> None:
                if future.done():
                    return
                try:
                    future.set_result(result.get_nowait())
                except Exception as err:  # noqa: BLE001 - translated below
                    future.set_exception(err)

            self._loop.call_soon_threadsafe(deliver)

        if self._without_session:
            # No session and no server to make one: fail now rather than after op_timeout_s,
            # so callers (a proxy's clients) can turn to another region at once.
            raise errors.MetadataUnavailableError(
                f"{operation} {path!r}: no ZooKeeper session (the last one was given up after "
                f"{self._give_up_s():g} s without a ZooKeeper "
                "server; reconnecting)"
            )
        try:
            start().rawlink(settle)
            # asyncio.timeout, not wait_for: Python 3.11's wait_for can swallow a cancellation
            # that races with the result, leaving the cancelled caller running on.
            async with asyncio.timeout(self._op_timeout_s):
                return await future
        except (KazooException, TimeoutError) as err:
            raise translate(err, operation, path) from err

    async def create(
        self,
        path: str,
        data: bytes = b"",
        *,
        ephemeral: bool = False,
        sequential: bool = False,
        make_parents: bool = False,
    ) -> str:
        """Creates a node; returns its path (with the sequence suffix when sequential)."""
        created = await self._await(
            "create",
            path,
            lambda: self._client.create_async(
                path, data, ephemeral=ephemeral, sequence=sequential, makepath=make_parents
            ),
        )
        return str(created)

    async def sync(self, path: str) -> None:
        """Brings this client's ZooKeeper server up to date with the leader for `path`:
        reads after it see every write committed before it (ZooKeeper's reads are otherwise
        served from the server's possibly lagging copy, and servers of other regions lag by
        a WAN round trip)."""
        await self._await("sync", path, lambda: self._client.sync_async(path))

    async def ensure_path(self, path: str) -> None:
        """Creates `path` and its parents when missing (no-op when it exists)."""
        await self._await("ensure_path", path, lambda: self._client.ensure_path_async(path))

    async def get(self, path: str) -> tuple[bytes, NodeStat]:
        data, stat = await self._await("get", path, lambda: self._client.get_async(path))
        return bytes(data or b""), NodeStat.of(stat)

    async def get_many(self, paths: Sequence[str]) -> list[tuple[bytes, NodeStat] | None]:
        """Every node's data and stat, None for a node that does not exist. The reads go in
        chunks of GET_MANY_CHUNK, each sent at once, the caller woken once per chunk (a
        thousand small reads cost the loop a few wake-ups, not one each), each chunk within
        the op timeout; any error but a missing node fails the call."""
        found: list[tuple[bytes, NodeStat] | None] = []
        for first in range(0, len(paths), GET_MANY_CHUNK):
            found += await self._get_chunk(paths[first : first + GET_MANY_CHUNK])
        return found

    async def _get_chunk(self, paths: Sequence[str]) -> list[tuple[bytes, NodeStat] | None]:
        if not paths:
            return []
        if self._without_session:
            raise errors.MetadataUnavailableError(
                f"get of {len(paths)} nodes: no ZooKeeper session (reconnecting)"
            )
        future: asyncio.Future[None] = self._loop.create_future()
        results: list[Any] = [None] * len(paths)
        left = [len(paths)]
        lock = threading.Lock()

        def settled(index: int) -> Callable[[Any], None]:
            def keep(result: Any) -> None:
                results[index] = result
                with lock:
                    left[0] -= 1
                    last = left[0] == 0
                if last:
                    self._loop.call_soon_threadsafe(
                        lambda: None if future.done() else future.set_result(None)
                    )

            return keep

        try:
            for i, path in enumerate(paths):
                self._client.get_async(path).rawlink(settled(i))
            async with asyncio.timeout(self._op_timeout_s):
                await future
        except (KazooException, TimeoutError) as err:
            raise translate(err, "get", f"{paths[0]} and {len(paths) - 1} more") from err
        found: list[tuple[bytes, NodeStat] | None] = []
        for path, result in zip(paths, results, strict=True):
            try:
                data, stat = result.get_nowait()
            except ZkNoNodeError:
                found.append(None)
                continue
            except KazooException as err:
                raise translate(err, "get", path) from err
            found.append((bytes(data or b""), NodeStat.of(stat)))
        return found

    async def exists(self, path: str) -> NodeStat | None:
        stat = await self._await("exists", path, lambda: self._client.exists_async(path))
        return None if stat is None else NodeStat.of(stat)

    async def children(self, path: str) -> list[str]:
        names = await self._await("children", path, lambda: self._client.get_children_async(path))
        return sorted(str(n) for n in names)

    async def set(self, path: str, data: bytes, *, version: int) -> NodeStat:
        """Compare-and-set: succeeds only if the node is still at `version`."""
        stat = await self._await("set", path, lambda: self._client.set_async(path, data, version))
        return NodeStat.of(stat)

    async def delete(self, path: str, *, version: int, recursive: bool = False) -> None:
        if recursive:
            # The walk lists and deletes children one by one: a node created under the tree
            # meanwhile (an operation sent before its caller was cancelled still lands) fails
            # the parent's delete, and a new walk takes it too.
            for walk in range(RECURSIVE_DELETE_WALKS):
                try:
                    async with asyncio.timeout(self._op_timeout_s):
                        await asyncio.to_thread(self._client.delete, path, version, True)
                    return
                except ZkNotEmptyError as err:
                    if walk == RECURSIVE_DELETE_WALKS - 1:
                        raise translate(err, "delete", path) from err
                except (KazooException, TimeoutError) as err:
                    raise translate(err, "delete", path) from err
        await self._await("delete", path, lambda: self._client.delete_async(path, version))

    async def commit(self, ops: Sequence[Op]) -> list[str | NodeStat | bool]:
        """Runs `ops` atomically; raises the first real failure (with its op index) if any."""
        assert ops, "an empty transaction is a programming error"
        transaction = self._client.transaction()
        for op in ops:
            if op.kind == "create":
                transaction.create(op.path, op.data, ephemeral=op.ephemeral)
            elif op.kind == "set":
                transaction.set_data(op.path, op.data, op.version)
            elif op.kind == "delete":
                transaction.delete(op.path, op.version)
            else:
                assert op.kind == "check", op.kind
                transaction.check(op.path, op.version)
        results = await self._await("commit", ops[0].path, transaction.commit_async)
        for index, result in enumerate(results):
            if isinstance(result, Exception) and not isinstance(result, RolledBackError):
                failure = translate(
                    result, f"commit op {index} ({ops[index].kind})", ops[index].path
                )
                raise failure from result
        return [NodeStat.of(r) if isinstance(r, ZnodeStat) else r for r in results]

    # -- the ensemble's own membership (ZooKeeper's dynamic reconfiguration) ------------------

    async def ensemble(self) -> EnsembleConfig:
        """The ensemble's voting members as ZooKeeper has them now (`/zookeeper/config`)."""
        await self.sync(ENSEMBLE_CONFIG_ZNODE)
        data, _ = await self.get(ENSEMBLE_CONFIG_ZNODE)
        return EnsembleConfig.parse(data)

    async def reconfig(
        self, joining: Sequence[str] = (), leaving: Sequence[int] = ()
    ) -> EnsembleConfig:
        """Adds the `joining` servers (`server.N=host:peer:election[:role][;client]` specs) and
        removes the `leaving` server ids in one reconfiguration; the new membership. Needs
        ZooKeeper's super user (docs/security.md) and a quorum of both old and new members."""
        assert joining or leaving, "an empty reconfiguration is a programming error"
        try:
            data, _ = await self._await(
                "reconfig",
                ENSEMBLE_CONFIG_ZNODE,
                lambda: self._client.reconfig_async(
                    ",".join(joining) or None, ",".join(map(str, leaving)) or None, None, -1
                ),
            )
        except errors.MetadataUnavailableError:
            raise
        except errors.MetadataError as err:
            raise errors.MetadataError(
                f"ZooKeeper refused the reconfiguration (joining {list(joining)}, leaving "
                f"{list(leaving)}): {err}. It needs every node's zoo.cfg with "
                "reconfigEnabled=true and superUser= the deployment's login (`globelog config "
                "zookeeper` writes both: restart a node configured before them), a quorum of "
                "both the old and the new members, and no other reconfiguration under way"
            ) from err
        return EnsembleConfig.parse(data)

    # -- watches and session events -----------------------------------------------------------

    async def watch_data(self, path: str) -> AsyncGenerator[tuple[bytes, NodeStat] | None, None]:
        """Yields the node's (data, stat) now and after each change; None while it is absent.

        A slow consumer sees the latest value, not every intermediate one (values coalesce).
        """
        mailbox: Mailbox[tuple[bytes, NodeStat] | None] = Mailbox(self._loop)

        def on_change(data: bytes | None, stat: ZnodeStat | None, *_: Any) -> bool:
            value = None if stat is None else (bytes(data or b""), NodeStat.of(stat))
            return mailbox.put_threadsafe(value)

        await self._register_watch(
            "watch_data", path, mailbox, lambda: self._client.DataWatch(path, on_change)
        )
        async for value in mailbox:
            yield value

    async def watch_children(self, path: str) -> AsyncGenerator[list[str], None]:
        """Yields the sorted child names now and after each change (values coalesce); raises
        NoNodeError when the node is missing, or once it is deleted (even if made again).

        kazoo's ChildrenWatch stops in silence when its node is deleted (its recipe takes the
        NoNodeError and calls nothing): a consumer would wait for ever on a watch that is
        dead while its follower says running. So a DataWatch on the same node, which is
        called on its deletion, ends the iteration then.
        """
        mailbox: Mailbox[list[str]] = Mailbox(self._loop)
        watched: list[int] = []  # the node's creation zxid, once seen: tells a new node apart

        def on_change(names: list[str]) -> bool:
            return mailbox.put_threadsafe(sorted(names))

        def on_node(data: bytes | None, stat: ZnodeStat | None, *_: Any) -> bool:
            if stat is not None and (not watched or stat.czxid == watched[0]):
                watched[:1] = [stat.czxid]
                return mailbox.listening
            return mailbox.fail_threadsafe(
                errors.NoNodeError(f"watch_children {path!r}: no such node (or it was deleted)")
            )

        def start() -> None:
            self._client.DataWatch(path, on_node)  # first: a missing node fails at once
            self._client.ChildrenWatch(path, on_change)

        await self._register_watch("watch_children", path, mailbox, start)
        async for value in mailbox:
            yield value

    async def _register_watch(
        self, operation: str, path: str, mailbox: Mailbox[Any], register: Callable[[], object]
    ) -> None:
        """Starts a kazoo watch recipe, off the event loop: its first read retries inside
        kazoo, with blocking sleeps, for as long as there is no connection. So it is not
        tried without one (a follower restarted while its region is cut off fails at once
        and tries again later), and it is given up after op_timeout_s (its mailbox closed,
        which stops the recipe once kazoo gets through)."""
        if self._without_session or not self._client.connected:
            raise errors.MetadataUnavailableError(
                f"{operation} {path!r}: not connected to ZooKeeper (a watch is set once "
                "connected again)"
            )
        try:
            async with asyncio.timeout(self._op_timeout_s):
                await asyncio.to_thread(register)
        except (KazooException, TimeoutError) as err:
            mailbox.close()
            raise translate(err, operation, path) from err
        except BaseException:
            mailbox.close()
            raise

    def session_events(self) -> SessionEvents:
        """Each session state change (connected, suspended, expired) from now on."""
        subscription = SessionEvents()
        self._subscribers.add(subscription)
        return subscription

    def _on_state(self, state: str) -> None:
        mapped = {
            KazooState.CONNECTED: SessionState.CONNECTED,
            KazooState.SUSPENDED: SessionState.SUSPENDED,
            KazooState.LOST: SessionState.EXPIRED,
        }[state]
        self._loop.call_soon_threadsafe(self._publish, mapped)

    def _publish(self, state: SessionState) -> None:
        self._watch_suspension(state)
        event = SessionEvent(state, self.session_id)
        for subscription in list(self._subscribers):
            subscription.deliver(event)

    # -- a session cut off from every server ------------------------------------------------

    def _watch_suspension(self, state: SessionState) -> None:
        """Arms the client-side expiry on SUSPENDED; a connection back disarms it."""
        if state is SessionState.CONNECTED:
            self._without_session = False
        if state is SessionState.SUSPENDED and not self._closing:
            if self._abandon_timer is None:
                self._suspensions += 1
                give_up_s = self._give_up_s()
                lead_s = isolation_check_lead_s(give_up_s, self.isolation_check is not None)
                self._suspended_at = self._loop.time()
                self._give_up_at = self._suspended_at + give_up_s
                self._abandon_timer = self._loop.call_later(
                    give_up_s - lead_s, self._give_up_session
                )
            return
        if self._abandon_timer is not None:
            self._abandon_timer.cancel()
            self._abandon_timer = None
        if self._checking is not None:  # its answer was for a suspension that has ended
            self._checking.cancel()
            self._checking = None

    def _give_up_s(self) -> float:
        return give_up_after_s(self._session_timeout_s, self.isolation_check is not None)

    def _give_up_session(self) -> None:
        self._abandon_timer = None
        if self._closing or self._client.state != KazooState.SUSPENDED:
            return
        if self.isolation_check is None:
            self._abandon_session()
        elif self._checking is None or self._checking.done():
            self._checking = self._loop.create_task(self._check_then_give_up(self.isolation_check))

    async def _check_then_give_up(self, check: Callable[[], Awaitable[bool]]) -> None:
        suspension = self._suspensions
        started_s = self._loop.time()
        try:
            async with asyncio.timeout(ISOLATION_CHECK_TIMEOUT_S):
                cut_off = await check()
        except Exception:
            log.warning("the isolation check failed; taking this process as cut off", exc_info=True)
            cut_off = True
        if cut_off:  # the check ran ahead of the give-up time: not before it
            await asyncio.sleep(max(0.0, self._give_up_at - self._loop.time()))
        if (
            self._closing
            or self._client.state != KazooState.SUSPENDED
            or suspension != self._suspensions
        ):
            return  # a server came back meanwhile
        if cut_off:
            self._abandon_session()
            return
        log.warning(
            "no ZooKeeper server for %.1f s, but most regions answer: an election, not a "
            "cut; keeping the session",
            started_s - self._suspended_at,
        )
        self._abandon_timer = self._loop.call_later(self._session_timeout_s, self._give_up_session)

    def _abandon_session(self) -> None:
        """No server for a session timeout: the ensemble has expired the session (unless an
        election ran that long), but kazoo learns that only from a server, which a client
        cut off from every ZooKeeper node that follows the leader does not reach until the
        cut heals.
        Until then a write proxy would keep believing it owns its streams and its clients
        would keep waiting on it. So the session is given up here: subscribers see
        EXPIRED (owners let their streams go), operations fail at once, and a new session is
        started, which connects when a server serves again. With an `isolation_check`, that
        happens only once the check says this process is cut off from most of the cluster; a
        process that still reaches most regions waits on (its server is electing)."""
        log.warning(
            "no ZooKeeper server for %.1f s (%g session timeouts): giving the session up",
            self._give_up_s(),
            self._give_up_s() / self._session_timeout_s,
        )
        self._without_session = True
        self._replacing = self._loop.create_task(self._replace_session())

    async def _replace_session(self) -> None:
        # stop() halts the reconnection attempts and reports LOST (published as EXPIRED);
        # start_async() then makes a fresh session that connects when a server answers.
        try:
            await asyncio.to_thread(self._client.stop)
            if not self._closing:
                self._client.start_async()
        except Exception:  # a failure here must not go unseen (I8): say it, stay closed
            log.exception("replacing the ZooKeeper session failed")
            raise
