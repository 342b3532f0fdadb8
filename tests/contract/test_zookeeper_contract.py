"""One set of cases, two ZooKeepers: the simulated one (verify/sim/zookeeper.py's state
behind verify/sim/io/zookeeper.py's SimMetaStore, on the deterministic loop where the
simulations run globelog's real code) and the real ensemble of the local cluster through
globelog's MetaStore. A case that passes against one and fails against the other is a fake
that lies; the real answers are the truth.

Each case works under a fresh random root path. A session is a store of its own on either
side (the simulated one run by its loop in a thread of its own, tests/support/sim_thread.py);
ending it closes the store.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from functools import partial
from typing import Any, Protocol, TypeVar

import pytest

from core import errors
from global_meta import MetaSession, MetaStore
from global_meta.faults import expire_session
from global_meta.store import ANY_VERSION, NodeStat, Op
from localcluster.controller import Cluster
from tests.support import security
from tests.support.sim_thread import SimThread
from verify.sim.io.loop import SimLoop
from verify.sim.io.network import Network
from verify.sim.io.zookeeper import SimMetaStore, ZooKeeperEnsemble

GUARD_S = 15.0  # every await on a real server is bounded by this
SESSION_TIMEOUT_S = 10.0
SEQUENTIAL = re.compile(r"(?P<prefix>.*\D)(?P<suffix>\d{10})")

Answer = str | NodeStat | bool  # one op's answer in a transaction
T = TypeVar("T")
Step = Callable[[MetaSession], Awaitable[object]]  # one change, made through the session
Seen = object  # a watch's value as the cases compare it (`watch_through`)
WATCH_WAIT_S = 5.0  # for a watch's value after a change
OnStore = Callable[[Callable[[], Awaitable[Any]]], Awaitable[Any]]


class Session(Protocol):
    """One client session: MetaStore's data operations."""

    @property
    def session_id(self) -> int | None: ...

    async def create(
        self,
        path: str,
        data: bytes = b"",
        *,
        ephemeral: bool = False,
        sequential: bool = False,
        make_parents: bool = False,
    ) -> str: ...

    async def get(self, path: str) -> tuple[bytes, NodeStat]: ...
    async def exists(self, path: str) -> NodeStat | None: ...
    async def children(self, path: str) -> list[str]: ...
    async def set(self, path: str, data: bytes, *, version: int) -> NodeStat: ...
    async def delete(self, path: str, *, version: int) -> None: ...
    async def commit(self, ops: Sequence[Op]) -> list[Answer]: ...

    async def sync(self, path: str) -> None:
        """Reads after this see every write committed before it (a real server may lag)."""

    async def watched(self, path: str, children: bool, steps: Sequence[Step]) -> list[Seen]:
        """What a watch of `path` yields at once and after each step (`watch_through`)."""

    async def idle(self, seconds: float) -> None:
        """Time passes for the session's client (its pings, its reconnection)."""

    states: list[str]  # the session states its store reported, in order


class ZooKeeperUnderTest(Protocol):
    async def session(self) -> Session: ...
    async def end(self, session: Session) -> None: ...

    async def expire(self, session: Session) -> None:
        """The ensemble itself ends the session (as after its timeout without a ping)."""


# -- the simulated ensemble --------------------------------------------------------------------


class Simulated:
    """SimMetaStores of simulated hosts over one simulated ensemble."""

    def __init__(self) -> None:
        self.loop = SimLoop(1)
        self.ensemble = ZooKeeperEnsemble(self.loop, Network(self.loop, self.loop.rng, {}), ["sim"])
        self.thread = SimThread(self.loop)
        self.open: list[RealSession] = []

    async def session(self) -> Session:
        host = self.loop.add_host(f"client-{len(self.loop.hosts)}", "sim", "127.0.61.1")

        async def connect() -> SimMetaStore:
            return await SimMetaStore.connect(self.ensemble, session_timeout_s=SESSION_TIMEOUT_S)

        store = await self.thread.call(host, connect)
        session = RealSession(store, partial(self.thread.call, host))
        await session.on_store(session.record_states)
        self.open.append(session)
        return session

    async def end(self, session: Session) -> None:
        assert isinstance(session, RealSession)
        self.open.remove(session)
        await session.on_store(session.stop_recording)
        await session.on_store(session.store.close)

    async def expire(self, session: Session) -> None:
        assert isinstance(session, RealSession) and session.session_id is not None
        self.ensemble.end_session(session.session_id)


# -- the real ensemble ---------------------------------------------------------------------------


async def at_once(make: Callable[[], Awaitable[T]]) -> T:
    return await make()


class RealSession:
    """A store of its own (a MetaStore, or a SimMetaStore whose calls `on_store` runs on the
    simulation's loop); every call bounded by GUARD_S."""

    def __init__(self, store: MetaSession, on_store: OnStore = at_once) -> None:
        self.store = store
        self.on_store = on_store
        self.states: list[str] = []
        self._recorder: asyncio.Task[None] | None = None

    async def record_states(self) -> None:
        """Starts noting the store's session states (a task on the store's own loop)."""
        subscription = self.store.session_events()

        async def note() -> None:
            async for event in subscription:
                self.states.append(event.state.value)

        self._recorder = asyncio.get_running_loop().create_task(note())

    async def stop_recording(self) -> None:
        if self._recorder is not None:
            self._recorder.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._recorder

    async def idle(self, seconds: float) -> None:
        await self.on_store(lambda: asyncio.sleep(seconds))

    @property
    def session_id(self) -> int | None:
        return self.store.session_id

    async def create(
        self,
        path: str,
        data: bytes = b"",
        *,
        ephemeral: bool = False,
        sequential: bool = False,
        make_parents: bool = False,
    ) -> str:
        async with asyncio.timeout(GUARD_S):
            return await self.on_store(
                lambda: self.store.create(
                    path,
                    data,
                    ephemeral=ephemeral,
                    sequential=sequential,
                    make_parents=make_parents,
                )
            )

    async def get(self, path: str) -> tuple[bytes, NodeStat]:
        async with asyncio.timeout(GUARD_S):
            return await self.on_store(lambda: self.store.get(path))

    async def exists(self, path: str) -> NodeStat | None:
        async with asyncio.timeout(GUARD_S):
            return await self.on_store(lambda: self.store.exists(path))

    async def children(self, path: str) -> list[str]:
        async with asyncio.timeout(GUARD_S):
            return await self.on_store(lambda: self.store.children(path))

    async def set(self, path: str, data: bytes, *, version: int) -> NodeStat:
        async with asyncio.timeout(GUARD_S):
            return await self.on_store(lambda: self.store.set(path, data, version=version))

    async def delete(self, path: str, *, version: int) -> None:
        async with asyncio.timeout(GUARD_S):
            await self.on_store(lambda: self.store.delete(path, version=version))

    async def commit(self, ops: Sequence[Op]) -> list[Answer]:
        async with asyncio.timeout(GUARD_S):
            return await self.on_store(lambda: self.store.commit(ops))

    async def sync(self, path: str) -> None:
        async with asyncio.timeout(GUARD_S):
            await self.on_store(lambda: self.store.sync(path))

    async def watched(self, path: str, children: bool, steps: Sequence[Step]) -> list[Seen]:
        async with asyncio.timeout(GUARD_S * (len(steps) + 1)):
            return await self.on_store(lambda: watch_through(self.store, path, children, steps))


async def watch_through(
    store: MetaSession, path: str, children: bool, steps: Sequence[Step]
) -> list[Seen]:
    """The values a watch of `path` yields: the first at once, then one after each step
    (made through `store`, the watching session), as (data, version) or None for data and as
    the sorted names for children; "gone" once a children watch ends (its node deleted)."""
    seen: list[Seen] = []
    watch = store.watch_children(path) if children else store.watch_data(path)
    async with contextlib.aclosing(watch):
        values = aiter(watch)
        for step in (None, *steps):
            if step is not None:
                await step(store)
            try:
                async with asyncio.timeout(WATCH_WAIT_S):
                    value = await anext(values)
            except errors.NoNodeError:
                seen.append("gone")
                break
            if children or value is None:
                seen.append(value)
            else:
                data, stat = value
                seen.append((data, stat.version))
    return seen


class Real:
    def __init__(self, hosts: str) -> None:
        self.hosts = hosts
        self.open: list[RealSession] = []

    async def session(self) -> Session:
        async with asyncio.timeout(GUARD_S):
            store = await MetaStore.connect(
                self.hosts, security.zk_login(), session_timeout_s=SESSION_TIMEOUT_S
            )
        session = RealSession(store)
        await session.record_states()
        self.open.append(session)
        return session

    async def end(self, session: Session) -> None:
        assert isinstance(session, RealSession)
        self.open.remove(session)
        await session.stop_recording()
        async with asyncio.timeout(GUARD_S):
            await session.store.close()

    async def expire(self, session: Session) -> None:
        assert isinstance(session, RealSession) and isinstance(session.store, MetaStore)
        await expire_session(session.store, timeout_s=GUARD_S)


@pytest.fixture
async def zookeeper(real_cluster: Cluster | None) -> AsyncIterator[ZooKeeperUnderTest]:
    if real_cluster is None:
        simulated = Simulated()
        try:
            yield simulated
        finally:
            for session in list(simulated.open):
                await simulated.end(session)
            simulated.thread.close()
        return
    real = Real(real_cluster.topology.zk_connect)
    try:
        yield real
    finally:
        for session in list(real.open):
            await real.end(session)


@pytest.fixture
def root() -> str:
    return f"/contract-{random.randrange(1 << 48):012x}"


async def fails(kind: type[errors.MetadataError], step: Callable[[], Awaitable[Any]]) -> str:
    """Runs `step`, which must raise exactly `kind` (not a subclass); its message."""
    with pytest.raises(kind) as caught:
        await step()
    assert type(caught.value) is kind, f"{type(caught.value).__name__}: {caught.value}"
    return str(caught.value)


def suffix(path: str) -> int:
    matched = SEQUENTIAL.fullmatch(path)
    assert matched is not None, f"{path!r} has no 10-digit sequence suffix"
    return int(matched["suffix"])


# -- the cases ----------------------------------------------------------------------------------


async def test_a_created_node_reads_back_at_version_0(
    zookeeper: ZooKeeperUnderTest, root: str
) -> None:
    zk = await zookeeper.session()
    assert await zk.create(root, b"seed") == root
    data, stat = await zk.get(root)
    assert data == b"seed"
    assert (stat.version, stat.children_version, stat.children) == (0, 0, 0)
    assert (stat.data_bytes, stat.ephemeral_owner) == (4, 0)
    assert await zk.exists(root) == stat


async def test_creating_an_existing_node_fails_and_keeps_it(
    zookeeper: ZooKeeperUnderTest, root: str
) -> None:
    zk = await zookeeper.session()
    await zk.create(root, b"first")
    said = await fails(errors.NodeExistsError, lambda: zk.create(root, b"second"))
    assert root in said
    assert await zk.get(root) == (b"first", await zk.exists(root))
    assert (await zk.get(root))[1].version == 0


async def test_a_create_needs_its_parent_unless_told_to_make_it(
    zookeeper: ZooKeeperUnderTest, root: str
) -> None:
    zk = await zookeeper.session()
    said = await fails(errors.NoNodeError, lambda: zk.create(f"{root}/a/b", b"x"))
    assert f"{root}/a/b" in said
    assert await zk.exists(root) is None, "a failed create leaves nothing behind"
    assert await zk.create(f"{root}/a/b", b"x", make_parents=True) == f"{root}/a/b"
    assert await zk.children(root) == ["a"]
    assert (await zk.get(f"{root}/a"))[0] == b"", "parents are made empty"
    assert (await zk.get(f"{root}/a/b"))[0] == b"x"


async def test_set_compares_the_version(zookeeper: ZooKeeperUnderTest, root: str) -> None:
    zk = await zookeeper.session()
    await zk.create(root, b"0")
    assert (await zk.set(root, b"1", version=0)).version == 1
    await fails(errors.BadVersionError, lambda: zk.set(root, b"stale", version=0))
    await fails(errors.BadVersionError, lambda: zk.set(root, b"ahead", version=2))
    assert (await zk.get(root))[0] == b"1", "a refused set changes nothing"
    stat = await zk.set(root, b"any", version=ANY_VERSION)
    assert (stat.version, stat.data_bytes) == (2, 3)
    assert (await zk.set(root, b"any again", version=ANY_VERSION)).version == 3
    assert await zk.get(root) == (b"any again", await zk.exists(root))
    await fails(errors.NoNodeError, lambda: zk.set(f"{root}/missing", b"", version=ANY_VERSION))


async def test_delete_compares_the_version_and_refuses_a_parent(
    zookeeper: ZooKeeperUnderTest, root: str
) -> None:
    zk = await zookeeper.session()
    await zk.create(f"{root}/child", make_parents=True)
    await zk.set(f"{root}/child", b"v1", version=0)
    await fails(errors.BadVersionError, lambda: zk.delete(f"{root}/child", version=0))
    await fails(errors.NotEmptyError, lambda: zk.delete(root, version=0))
    await fails(errors.NotEmptyError, lambda: zk.delete(root, version=ANY_VERSION))
    # the version is compared first
    await fails(errors.BadVersionError, lambda: zk.delete(root, version=5))
    assert await zk.children(root) == ["child"], "refused deletes change nothing"
    await zk.delete(f"{root}/child", version=1)
    await zk.delete(root, version=0)
    assert await zk.exists(root) is None
    await fails(errors.NoNodeError, lambda: zk.delete(root, version=ANY_VERSION))


async def test_children_are_sorted_names(zookeeper: ZooKeeperUnderTest, root: str) -> None:
    zk = await zookeeper.session()
    await zk.create(root)
    for name in ("b", "a10", "c", "a9"):
        await zk.create(f"{root}/{name}")
    assert await zk.children(root) == ["a10", "a9", "b", "c"]
    stat = await zk.exists(root)
    assert stat is not None and stat.children == 4
    assert await zk.children(f"{root}/b") == []
    await fails(errors.NoNodeError, lambda: zk.children(f"{root}/missing"))


async def test_sequential_suffixes_count_creates_and_children_version_counts_deletes(
    zookeeper: ZooKeeperUnderTest, root: str
) -> None:
    """The suffix is the parent's count of child creates so far; the stat's
    children_version counts creates and deletes. A refused create counts for neither."""
    zk = await zookeeper.session()
    await zk.create(root)
    first = await zk.create(f"{root}/n-", b"", sequential=True)
    second = await zk.create(f"{root}/n-", b"", sequential=True)
    assert (first, second) == (f"{root}/n-0000000000", f"{root}/n-0000000001")
    await zk.create(f"{root}/plain")
    await fails(errors.NodeExistsError, lambda: zk.create(f"{root}/plain"))
    await zk.delete(f"{root}/plain", version=ANY_VERSION)
    await zk.delete(second, version=ANY_VERSION)
    stat = await zk.exists(root)
    assert stat is not None and (stat.children_version, stat.children) == (5, 1)
    third = await zk.create(f"{root}/n-", b"", sequential=True)
    assert suffix(third) == 3, third
    bare = await zk.create(f"{root}/", b"", sequential=True)  # a name of digits only
    assert bare == f"{root}/0000000004"
    stat = await zk.exists(root)
    assert stat is not None and (stat.children_version, stat.children) == (7, 3)


async def test_exists_of_a_missing_node_is_none(zookeeper: ZooKeeperUnderTest, root: str) -> None:
    zk = await zookeeper.session()
    assert await zk.exists(root) is None
    assert await zk.exists(f"{root}/under/a/missing/parent") is None
    await fails(errors.NoNodeError, lambda: zk.get(root))


async def test_a_transaction_is_all_or_nothing(zookeeper: ZooKeeperUnderTest, root: str) -> None:
    zk = await zookeeper.session()
    await zk.create(f"{root}/a", b"0", make_parents=True)
    await zk.create(f"{root}/old")
    before = await zk.exists(root)
    ops = [
        Op("create", f"{root}/new", b"x"),
        Op("set", f"{root}/a", b"1", version=0),
        Op("delete", f"{root}/old", version=0),
        Op("check", f"{root}/a", version=7),
    ]
    said = await fails(errors.BadVersionError, lambda: zk.commit(ops))
    assert "op 3 (check)" in said and f"{root}/a" in said
    assert await zk.children(root) == ["a", "old"], "the create and delete were undone"
    assert (await zk.get(f"{root}/a"))[0] == b"0", "the set was undone"
    assert (await zk.get(f"{root}/a"))[1].version == 0
    assert await zk.exists(root) == before, "a rolled-back create counts for nothing"
    answers = await zk.commit([Op("check", f"{root}/a", version=0), *ops[:3]])
    assert answers[0] is True and answers[1] == f"{root}/new" and answers[3] is True
    set_stat = answers[2]
    assert isinstance(set_stat, NodeStat) and set_stat.version == 1
    assert await zk.children(root) == ["a", "new"]
    assert await zk.get(f"{root}/a") == (b"1", set_stat)


async def test_a_failed_transaction_names_its_first_failing_op(
    zookeeper: ZooKeeperUnderTest, root: str
) -> None:
    zk = await zookeeper.session()
    await zk.create(f"{root}/full/child", make_parents=True)
    cases: list[tuple[type[errors.MetadataError], Op, str]] = [
        (errors.NodeExistsError, Op("create", f"{root}/full"), "op 1 (create)"),
        (errors.NoNodeError, Op("create", f"{root}/none/x"), "op 1 (create)"),
        (errors.NotEmptyError, Op("delete", f"{root}/full"), "op 1 (delete)"),
        (errors.NoNodeError, Op("set", f"{root}/none", b""), "op 1 (set)"),
        (errors.NoNodeError, Op("check", f"{root}/none"), "op 1 (check)"),
    ]
    for kind, op, where in cases:
        ops = [Op("create", f"{root}/made"), op, Op("check", f"{root}/full", version=9)]
        said = await fails(kind, partial(zk.commit, ops))
        assert where in said, (where, said)
        assert await zk.exists(f"{root}/made") is None


async def test_an_ephemeral_node_goes_with_its_session(
    zookeeper: ZooKeeperUnderTest, root: str
) -> None:
    owner, watcher = await zookeeper.session(), await zookeeper.session()
    await watcher.create(root)
    lock = await owner.create(f"{root}/lock-", b"me", ephemeral=True, sequential=True)
    assert suffix(lock) == 0
    await watcher.sync(root)  # another session's server may lag the leader until it syncs
    stat = await watcher.exists(lock)
    assert stat is not None and stat.ephemeral_owner == owner.session_id != 0
    assert (await watcher.get(lock))[0] == b"me"
    await zookeeper.end(owner)
    await watcher.sync(root)
    assert await watcher.exists(lock) is None
    assert await watcher.children(root) == []
    stat = await watcher.exists(root)
    assert stat is not None and stat.children_version == 2, "the session's end is a delete"


async def test_an_ephemeral_node_cannot_have_children(
    zookeeper: ZooKeeperUnderTest, root: str
) -> None:
    zk = await zookeeper.session()
    await zk.create(root)
    lock = await zk.create(f"{root}/lock", ephemeral=True)
    said = await fails(errors.MetadataError, lambda: zk.create(f"{lock}/child"))
    assert f"{lock}/child" in said
    await fails(errors.MetadataError, lambda: zk.create(f"{lock}/a/b", make_parents=True))
    ops = [Op("create", f"{root}/eph", ephemeral=True), Op("create", f"{root}/eph/child")]
    said = await fails(errors.MetadataError, lambda: zk.commit(ops))
    assert "op 1 (create)" in said
    assert await zk.children(root) == ["lock"]
    assert await zk.children(lock) == []


async def test_a_data_watch_sees_the_node_then_each_change_then_its_deletion(
    zookeeper: ZooKeeperUnderTest, root: str
) -> None:
    zk = await zookeeper.session()
    await zk.create(root, b"a")
    seen = await zk.watched(
        root,
        False,
        [
            lambda s: s.set(root, b"b", version=0),
            lambda s: s.delete(root, version=1),
            lambda s: s.create(root, b"c"),
        ],
    )
    assert seen == [(b"a", 0), (b"b", 1), None, (b"c", 0)]


async def test_a_children_watch_sees_each_child_and_ends_with_its_node(
    zookeeper: ZooKeeperUnderTest, root: str
) -> None:
    zk = await zookeeper.session()
    await zk.create(root)
    seen = await zk.watched(
        root,
        True,
        [
            lambda s: s.create(f"{root}/x"),
            lambda s: s.create(f"{root}/y", ephemeral=True),
            lambda s: s.delete(f"{root}/x", version=0),
            lambda s: s.delete(f"{root}/y", version=0),
            lambda s: s.delete(root, version=0),
        ],
    )
    assert seen == [[], ["x"], ["x", "y"], ["y"], [], "gone"]


async def test_a_children_watch_of_a_missing_node_fails_at_once(
    zookeeper: ZooKeeperUnderTest, root: str
) -> None:
    zk = await zookeeper.session()
    assert await zk.watched(f"{root}/missing", True, []) == ["gone"]


async def test_an_expired_session_loses_its_ephemerals_and_its_client_starts_a_new_one(
    zookeeper: ZooKeeperUnderTest, root: str
) -> None:
    """What an owner whose session the ensemble ended sees: EXPIRED, its ephemeral nodes gone
    (its locks), then a new session of its own, with which it works on."""
    owner, other = await zookeeper.session(), await zookeeper.session()
    await other.create(root)
    await owner.create(f"{root}/lock", ephemeral=True)
    first = owner.session_id
    await zookeeper.expire(owner)
    for _ in range(60):  # until the client has heard and made a new session
        await owner.idle(0.5)
        if owner.session_id not in (None, first) and owner.states[-1:] == ["connected"]:
            break
    assert "expired" in owner.states and owner.states[-1] == "connected", owner.states
    assert owner.session_id not in (None, first)
    await other.sync(root)
    assert await other.exists(f"{root}/lock") is None
    await owner.create(f"{root}/lock", ephemeral=True)
    await other.sync(root)  # another session's server may lag the leader until it syncs
    stat = await other.exists(f"{root}/lock")
    assert stat is not None and stat.ephemeral_owner == owner.session_id
