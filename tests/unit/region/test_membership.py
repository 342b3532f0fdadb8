"""A proxy's registration follows its ZooKeeper sessions: a session that changes while it
registers, or while it catches up after a restart, is followed, not lost; and registering
that keeps failing ends in a follower that shows restarting, not one that retries for ever
while health says running.

Driven by a scripted store at the MetaStore seam: its session expires when the test says,
its create replies wait when the test holds them, and the test waits on what the store saw
(a create in flight, a registration in a session), never on time.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest

from core.errors import (
    GlobelogError,
    MetadataUnavailableError,
    NodeExistsError,
    SessionExpiredError,
)
from global_meta.followers import FollowerState, FollowerStatus, RestartBackoff
from global_meta.store import NodeStat, SessionEvent, SessionEvents, SessionState
from region.registry import (
    PREDECESSOR_POLL_S,
    REREGISTER_ATTEMPTS_MAX,
    Membership,
    ProxyInfo,
    proxy_path,
)

ME = ProxyInfo("w1", "us-east", "http://127.0.0.1:9001")
NODE = proxy_path(ME.region, "write", ME.name)
QUICK = RestartBackoff(first_s=0.001, cap_s=0.001)  # restarts at once: the test waits on events
GUARD_S = 10.0  # bounds a wait that a bug would make endless; never reached when it passes


class ScriptedStore:
    """The MetaStore calls a Membership makes, over one node table and numbered sessions."""

    def __init__(self) -> None:
        self.session: int | None = 1
        self.owners: dict[str, int] = {}  # ephemeral node -> its session
        self.subscriptions: list[SessionEvents] = []
        self.hold: asyncio.Event | None = None  # set: create replies wait for it
        self.creating = asyncio.Event()  # a create was done and its reply waits
        self.registered: asyncio.Queue[int] = asyncio.Queue()  # the session of each create
        self.failing: Exception | None = None  # exists and create fail with it
        self.create_failures: list[Exception] = []  # the next creates fail with these, in turn
        self.creates = 0  # creates tried

    @property
    def session_id(self) -> int | None:
        return self.session

    def session_events(self) -> SessionEvents:
        subscription = SessionEvents()
        self.subscriptions.append(subscription)
        return subscription

    def expire(self) -> None:
        """The session expires (its nodes go) and the next one connects."""
        assert self.session is not None
        self.owners = {p: s for p, s in self.owners.items() if s != self.session}
        self._publish(SessionState.EXPIRED)
        self.session += 1
        self._publish(SessionState.CONNECTED)

    def _publish(self, state: SessionState) -> None:
        for subscription in self.subscriptions:
            subscription.deliver(SessionEvent(state, self.session))

    async def ensure_path(self, path: str) -> None:
        pass

    async def exists(self, path: str) -> NodeStat | None:
        if self.failing is not None:
            raise self.failing
        owner = self.owners.get(path)
        return None if owner is None else NodeStat(0, 0, 0, 0, owner, 0, 0)

    async def create(self, path: str, data: bytes = b"", *, ephemeral: bool = False) -> str:
        self.creates += 1
        if self.failing is not None:
            raise self.failing
        if self.create_failures:
            raise self.create_failures.pop(0)
        session = self.session
        if session is None:
            raise SessionExpiredError(f"create {path!r}: session expired")
        if path in self.owners:
            raise NodeExistsError(f"create {path!r}: node already exists")
        self.owners[path] = session  # done at the server; the reply is on its way
        if self.hold is not None:
            self.creating.set()
            await self.hold.wait()
        self.registered.put_nowait(session)
        return path


async def registered_in(store: ScriptedStore, session: int) -> None:
    async with asyncio.timeout(GUARD_S):
        while await store.registered.get() != session:
            pass
    assert store.owners.get(NODE) == session


def membership(
    store: ScriptedStore, expired: list[int], failed: asyncio.Event | None = None
) -> Membership:
    async def on_expired() -> None:
        expired.append(store.session or 0)

    async def no_wait(delay_s: float) -> None:
        pass

    def on_failed(status: FollowerStatus) -> None:
        if failed is not None:
            failed.set()

    return Membership(
        cast(Any, store),
        "write",
        ME,
        on_expired,
        on_failed,
        restart_backoff=QUICK,
        sleep=no_wait,
    )


async def test_a_session_that_changes_while_registering_again_is_followed() -> None:
    """Session 2 registers; before its reply is taken, 2 expires and 3 connects. The
    registration is for 2, so 3's CONNECTED registers again in 3."""
    store, expired = ScriptedStore(), []
    member = membership(store, expired)
    await member.start()
    assert await store.registered.get() == 1
    store.hold = asyncio.Event()
    store.expire()  # 1 -> 2: registering again in 2, its reply held
    await store.creating.wait()
    store.expire()  # 2 -> 3 while the reply of 2's create is on its way
    store.hold.set()
    await registered_in(store, 3)
    assert member.status().state is FollowerState.RUNNING
    assert member.expirations == 2 and expired == [2, 3], "both sessions' expiries told"
    await member.stop()


async def test_registering_that_keeps_failing_restarts_and_the_catch_up_misses_no_expiry() -> None:
    """Registering in session 2 fails every try: the follower fails after a bounded number
    and shows restarting. Its restart catches up with session 2; session 2 expires while
    that registration's reply is on its way: the EXPIRED and 3's CONNECTED are followed."""
    store, expired, failed = ScriptedStore(), [], asyncio.Event()
    member = membership(store, expired, failed)
    await member.start()
    assert await store.registered.get() == 1
    store.failing = MetadataUnavailableError(f"exists {NODE!r}: connection to ZooKeeper lost")
    store.hold = asyncio.Event()
    store.expire()  # 1 -> 2: every try to register again fails
    async with asyncio.timeout(GUARD_S):
        await failed.wait()
    status = member.status()
    assert status.state is FollowerState.RESTARTING and status.restarts >= 1
    assert status.last_error is not None and "connection to ZooKeeper lost" in status.last_error
    store.failing = None  # the restart's catch-up registers in 2; its reply is held
    async with asyncio.timeout(GUARD_S):
        await store.creating.wait()
    store.expire()  # 2 -> 3 during the catch-up
    store.hold.set()
    await registered_in(store, 3)
    assert member.expirations == 2 and expired == [2, 3], "session 2's expiry is not lost"
    assert member.status().state is FollowerState.RUNNING
    await member.stop()


async def test_a_restarted_proxy_waits_out_its_predecessors_registration() -> None:
    """The process before a restart (killed) left its registration in session 1; the new one
    (session 2) waits for that session's end instead of failing, then registers."""
    store, expired = ScriptedStore(), []
    store.owners[NODE] = 1
    store.session = 2
    member = Membership(cast(Any, store), "write", ME, predecessor_wait_s=GUARD_S)
    starting = asyncio.ensure_future(member.start())
    await asyncio.sleep(PREDECESSOR_POLL_S * 2)
    assert not starting.done(), "it waits while the predecessor's registration is there"
    del store.owners[NODE]  # session 1 ended
    async with asyncio.timeout(GUARD_S):
        await starting
    assert store.owners[NODE] == 2
    await member.stop()
    assert expired == []


async def test_a_name_still_registered_after_the_wait_is_taken_and_said_so() -> None:
    store = ScriptedStore()
    store.owners[NODE] = 7  # another live proxy with this name
    store.session = 2
    member = Membership(cast(Any, store), "write", ME, predecessor_wait_s=PREDECESSOR_POLL_S)
    with pytest.raises(
        GlobelogError,
        match=r"already registered in us-east \(ZooKeeper session 0x7, still there after 0\.2 s",
    ):
        async with asyncio.timeout(GUARD_S):
            await member.start()
    await member.stop()
    assert store.owners[NODE] == 7
    # One registration's creates (a first, and one per poll of the wait), not start's
    # REREGISTER_ATTEMPTS_MAX tries of them.
    assert store.creates < REREGISTER_ATTEMPTS_MAX, "a name another proxy holds is not retried"


async def test_a_start_whose_zookeeper_is_away_or_whose_session_ends_registers_on_a_later_try() -> (
    None
):
    """A proxy started beside a loaded ensemble: its first create finds the connection lost,
    the next one's session expired. Start tries again and registers; it does not exit."""
    store, expired = ScriptedStore(), []
    store.create_failures = [
        MetadataUnavailableError(f"create {NODE!r}: connection to ZooKeeper lost"),
        SessionExpiredError(f"create {NODE!r}: session expired"),
    ]
    member = membership(store, expired)
    async with asyncio.timeout(GUARD_S):
        await member.start()
    assert store.owners[NODE] == 1 and store.creates == 3
    await member.stop()


async def test_a_start_that_never_reaches_zookeeper_fails_after_its_tries() -> None:
    store, expired = ScriptedStore(), []
    store.create_failures = [
        MetadataUnavailableError(f"create {NODE!r}: connection to ZooKeeper lost")
    ] * (REREGISTER_ATTEMPTS_MAX + 1)
    member = membership(store, expired)
    with pytest.raises(MetadataUnavailableError, match="connection to ZooKeeper lost"):
        async with asyncio.timeout(GUARD_S):
            await member.start()
    assert store.creates == REREGISTER_ATTEMPTS_MAX and NODE not in store.owners
    await member.stop()


async def test_a_registration_found_to_be_this_sessions_own_is_kept() -> None:
    """A create answered twice (its reply lost, then retried), or the node made again in a new
    session while waiting: the name is ours, not a rival's, and start goes on."""
    store = ScriptedStore()
    store.owners[NODE] = 1  # our session's already
    member = Membership(cast(Any, store), "write", ME, predecessor_wait_s=0.0)
    async with asyncio.timeout(GUARD_S):
        await member.start()
    assert store.owners[NODE] == 1
    await member.stop()
