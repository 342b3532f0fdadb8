"""Which proxies are alive: each registers an ephemeral znode; a region's write proxies form a
consistent-hash ring (uhashring) that gives every stream its home proxy.

    /globelog/proxies/<region>/<kind>/<name>   ephemeral, JSON {"name", "region", "url"}
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

from uhashring import HashRing

from core import runtime
from core.errors import (
    GlobelogError,
    MetadataUnavailableError,
    NodeExistsError,
    NoNodeError,
    SessionExpiredError,
)
from global_meta import MetaSession
from global_meta.followers import Follower, FollowerStatus, RestartBackoff
from global_meta.store import SessionState

ROOT = "/globelog/proxies"
REREGISTER_RETRY_S = 0.5
# Tries at registering in a new session (the old node not yet gone, ZooKeeper away again)
# before the follower fails: it then shows restarting, and its restart tries again.
REREGISTER_ATTEMPTS_MAX = 10
# How long a proxy's address gets to accept or refuse a connection when a client could not
# reach it (`refuses_connections`): a refusal comes back within a round trip.
GONE_PROBE_S = 0.5
PREDECESSOR_POLL_S = 0.25  # between looks at an earlier registration of a proxy's name
log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ProxyInfo:
    name: str
    region: str
    url: str  # https://host:port (http:// with TLS off), no trailing slash


def proxy_path(region: str, kind: str, name: str = "") -> str:
    base = f"{ROOT}/{region}/{kind}"
    return f"{base}/{name}" if name else base


async def register(
    store: MetaSession, kind: str, info: ProxyInfo, predecessor_wait_s: float = 0.0
) -> None:
    """Announces a live proxy (gone with the store's session). A registration of the name
    from another session is waited out for up to `predecessor_wait_s` (a proxy restarted at
    once after a kill finds its old one, which goes with the old session); one still there
    after that is another live proxy's: the name is taken."""
    body = json.dumps({"name": info.name, "region": info.region, "url": info.url}).encode()
    path = proxy_path(info.region, kind, info.name)
    await store.ensure_path(proxy_path(info.region, kind))
    deadline_s = runtime.monotonic() + predecessor_wait_s
    told = False
    while True:
        try:
            await store.create(path, body, ephemeral=True)
            return
        except NodeExistsError as err:
            stat = await store.exists(path)
            if stat is None:
                continue  # gone since: create again
            if stat.ephemeral_owner == store.session_id:
                return  # ours: a create answered twice, or made again in a new session
            if runtime.monotonic() >= deadline_s:
                raise GlobelogError(
                    f"a {kind} proxy named {info.name!r} is already registered in "
                    f"{info.region} (ZooKeeper session {_hex(stat.ephemeral_owner)}, still "
                    f"there after {predecessor_wait_s:.1f} s: another live proxy has this name)"
                ) from err
            if predecessor_wait_s > 0 and not told:
                told = True
                log.info(
                    "%s proxy %s: an earlier registration (session %s) is still there; "
                    "waiting for its session to end",
                    kind,
                    info.name,
                    _hex(stat.ephemeral_owner),
                )
            await asyncio.sleep(PREDECESSOR_POLL_S)


async def lookup(store: MetaSession, kind: str, region: str, name: str) -> ProxyInfo | None:
    found = await registration(store, kind, region, name)
    return None if found is None else found[0]


async def registration(
    store: MetaSession, kind: str, region: str, name: str
) -> tuple[ProxyInfo, int] | None:
    """A live proxy's registration and the ZooKeeper session that made it (which holds the
    proxy's ownership locks too); None when it is not registered."""
    try:
        data, stat = await store.get(proxy_path(region, kind, name))
    except NoNodeError:
        return None
    try:
        body = json.loads(data)
        info = ProxyInfo(str(body["name"]), str(body["region"]), str(body["url"]))
    except (ValueError, KeyError, TypeError):
        log.warning("proxy znode %s/%s/%s holds %r, not its JSON", region, kind, name, data)
        return None
    return info, stat.ephemeral_owner


async def refuses_connections(url: str, timeout_s: float = GONE_PROBE_S) -> bool:
    """True when the machine at a proxy's `url` refuses a connection: nothing listens there,
    so the process that registered it is gone (killed, crashed, exited) though its ZooKeeper
    session has not ended yet. False when a connection is made, or nothing answers within
    `timeout_s` (a paused process, a machine down or cut off): only the session's end tells
    those from a live proxy."""
    parts = urlsplit(url)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:  # a port out of range: nothing to tell from it
        return False
    if parts.hostname is None:
        return False
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(timeout_s):
            transport, _ = await loop.create_connection(asyncio.Protocol, parts.hostname, port)
    except ConnectionRefusedError:
        return True
    except (OSError, TimeoutError):
        return False
    transport.close()
    return False


async def live_urls(store: MetaSession, kind: str, region: str) -> list[str]:
    """The URLs of `region`'s live proxies of `kind` ("write" or "read"), from their
    registrations: what a client needs instead of a seed list."""
    try:
        names = await store.children(proxy_path(region, kind))
    except NoNodeError:
        return []
    found = [await lookup(store, kind, region, name) for name in names]
    return [info.url for info in found if info is not None]


class Membership:
    """A proxy's registration, kept across ZooKeeper sessions.

    When the session expires (a partition, a pause past the timeout) the proxy's ephemeral
    nodes are gone: its registration, and the ownership locks of its streams, which other
    proxies may already have taken. `on_expired` lets the proxy drop what it no longer owns;
    once the store has a new session, the proxy registers again and serves anew. The
    follower of session events runs supervised: restarted after a failure, it first catches
    up with a session that changed while it was down. It subscribes to the session's events
    before it reads the session, and registers for the session it read before registering:
    a change while it registers comes as an event and is followed, never lost.
    """

    def __init__(
        self,
        store: MetaSession,
        kind: str,
        info: ProxyInfo,
        on_expired: Callable[[], Awaitable[None]] | None = None,
        on_failed: Callable[[FollowerStatus], None] | None = None,
        *,
        restart_backoff: RestartBackoff | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        predecessor_wait_s: float = 0.0,
    ) -> None:
        """`predecessor_wait_s`: as for `register`."""
        self._store = store
        self._predecessor_wait_s = predecessor_wait_s
        self._kind = kind
        self.info = info
        self._on_expired = on_expired
        self._sleep = sleep
        self._session = store.session_id  # the session our registration belongs to
        self._told_expired = False  # the owner knows that session's nodes are gone
        self._follower = Follower(
            "registration", self._follow, backoff=restart_backoff, on_failed=on_failed
        )
        self.expirations = 0

    async def start(self) -> None:
        """Registers, trying again while ZooKeeper is away or the session ends under the
        create (a start beside a loaded ensemble): up to REREGISTER_ATTEMPTS_MAX tries. A name
        another live proxy holds fails at once."""
        self._follower.start()
        await asyncio.sleep(0)  # the follower subscribes to session events before we register
        await self._tried(
            lambda: register(self._store, self._kind, self.info, self._predecessor_wait_s),
            (MetadataUnavailableError, SessionExpiredError),
        )

    def status(self) -> FollowerStatus:
        return self._follower.status()

    async def _follow(self, following: Callable[[], None]) -> None:
        # Subscribed first: a change during the catch-up below waits in `events`.
        async with contextlib.aclosing(self._store.session_events()) as events:
            session = self._store.session_id
            if session != self._session:  # it changed while we were not following
                await self._session_changed(session)
            following()
            async for event in events:
                if event.state is SessionState.EXPIRED:
                    await self._expired()
                elif event.state is SessionState.CONNECTED and event.session_id != self._session:
                    await self._session_changed(event.session_id)

    async def _session_changed(self, session: int | None) -> None:
        """A session other than ours: our nodes went with ours (its EXPIRED may have been
        missed, or dropped as stale); register again in `session` if there is one."""
        await self._expired()
        if session is not None:
            await self._registered_again(session)

    async def _expired(self) -> None:
        if self._told_expired:
            return  # the owner knows already (an EXPIRED, then the new session's CONNECTED)
        self._told_expired = True
        self.expirations += 1
        log.warning(
            "%s proxy %s: ZooKeeper session %s expired; its registration and locks are gone",
            self._kind,
            self.info.name,
            _hex(self._session),
        )
        if self._on_expired is not None:
            await self._on_expired()

    async def _registered_again(self, session: int) -> None:
        await self._register_again(session)
        # `session`, read before registering: if another one came meanwhile, its events wait
        # in the subscription and register us again in it.
        self._session = session
        self._told_expired = False
        log.info(
            "%s proxy %s registered again (session %s)",
            self._kind,
            self.info.name,
            _hex(self._session),
        )

    async def _register_again(self, session: int) -> None:
        """Registers in the store's session (`session`, or a newer one); raises the last
        error after REREGISTER_ATTEMPTS_MAX failed tries (the follower shows it, restarting):
        the old node may not be gone yet, or ZooKeeper away again."""
        path = proxy_path(self.info.region, self._kind, self.info.name)

        async def once() -> None:
            stat = await self._store.exists(path)
            if stat is None or stat.ephemeral_owner != session:  # not registered in it yet
                await register(self._store, self._kind, self.info)

        await self._tried(once, (GlobelogError,))

    async def _tried(
        self, once: Callable[[], Awaitable[None]], retried: tuple[type[Exception], ...]
    ) -> None:
        """`once` until it succeeds, REREGISTER_RETRY_S apart after an error of `retried`;
        the last one raised after REREGISTER_ATTEMPTS_MAX tries."""
        for attempt in range(1, REREGISTER_ATTEMPTS_MAX + 1):
            try:
                await once()
                return
            except retried as err:
                if attempt == REREGISTER_ATTEMPTS_MAX:
                    raise
                log.warning("registering %s: %s; retrying", self.info.name, err)
                await self._sleep(REREGISTER_RETRY_S)

    async def stop(self) -> None:
        await self._follower.stop()


def _hex(session: int | None) -> str:
    return "none" if session is None else f"0x{session:x}"


class Ring:
    """A region's live proxies of one kind, kept current by a supervised ZooKeeper watch."""

    def __init__(
        self,
        store: MetaSession,
        kind: str,
        region: str,
        on_failed: Callable[[FollowerStatus], None] | None = None,
    ) -> None:
        self._store = store
        self._kind = kind
        self.region = region
        self._names: list[str] = []
        self._ring = HashRing(nodes=[])
        self._ready = asyncio.Event()
        self._follower = Follower(f"{kind} proxies of {region}", self._follow, on_failed=on_failed)

    async def start(self, timeout_s: float) -> None:
        await self._store.ensure_path(proxy_path(self.region, self._kind))
        self._follower.start()
        async with asyncio.timeout(timeout_s):
            await self._ready.wait()

    def status(self) -> FollowerStatus:
        return self._follower.status()

    async def _follow(self, following: Callable[[], None]) -> None:
        path = proxy_path(self.region, self._kind)
        async with contextlib.aclosing(self._store.watch_children(path)) as watch:
            async for names in watch:
                following()
                self._names = names
                self._ring = HashRing(nodes=names)
                self._ready.set()

    async def stop(self) -> None:
        await self._follower.stop()

    @property
    def names(self) -> list[str]:
        return list(self._names)

    def home(self, key: str) -> str | None:
        """The live proxy that should own `key`, or None when none is alive."""
        if not self._names:
            return None
        return str(self._ring.get_node(key))
