"""One set of cases, two ZooKeepers: the simulated one (verify/sim/zookeeper.py) and the
real ensemble of the local cluster through globelog's MetaStore. Each case runs under a
fresh random root path. Sessions: the real cases close a MetaStore; the simulated ones close
the session.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol

import pytest

from cli.cluster.controller import Cluster
from core import errors
from global_meta import MetaStore
from global_meta.store import ANY_VERSION, NodeStat, Op
from verify.sim.zookeeper import SimZooKeeper

GUARD_S = 15.0


class Session(Protocol):
    async def create(
        self, path: str, data: bytes = b"", *, ephemeral: bool = False, sequential: bool = False,
        make_parents: bool = False,
    ) -> str: ...  # fmt: skip
    async def get(self, path: str) -> tuple[bytes, NodeStat]: ...
    async def exists(self, path: str) -> NodeStat | None: ...
    async def children(self, path: str) -> list[str]: ...
    async def set(self, path: str, data: bytes, *, version: int) -> NodeStat: ...
    async def delete(self, path: str, *, version: int) -> None: ...
    async def commit(self, ops: list[Op]) -> list[Any]: ...
    async def sync(self, path: str) -> None: ...


class ZooKeeperUnderTest(Protocol):
    async def session(self) -> Session: ...
    async def end(self, session: Session) -> None: ...


class SimSession:
    def __init__(self, zk: SimZooKeeper) -> None:
        self.zk = zk
        self.id = zk.open_session(10.0)

    async def create(
        self, path: str, data: bytes = b"", *, ephemeral: bool = False, sequential: bool = False,
        make_parents: bool = False,
    ) -> str:  # fmt: skip
        session = self.id if ephemeral else None
        return self.zk.create(
            path, data, session=session, sequential=sequential, make_parents=make_parents
        )

    async def get(self, path: str) -> tuple[bytes, NodeStat]:
        data, stat = self.zk.get(path)
        return data, stat

    async def exists(self, path: str) -> NodeStat | None:
        return self.zk.exists(path)

    async def children(self, path: str) -> list[str]:
        return self.zk.children(path)

    async def set(self, path: str, data: bytes, *, version: int) -> NodeStat:
        return self.zk.set(path, data, version=version)

    async def delete(self, path: str, *, version: int) -> None:
        self.zk.delete(path, version=version)

    async def commit(self, ops: list[Op]) -> list[Any]:
        return self.zk.commit(ops, session=self.id)

    async def sync(self, path: str) -> None:
        """Nothing to do: the simulated ensemble has one copy (reads never lag)."""


class Simulated:
    def __init__(self) -> None:
        self.zk = SimZooKeeper()

    async def session(self) -> Session:
        return SimSession(self.zk)

    async def end(self, session: Session) -> None:
        assert isinstance(session, SimSession)
        self.zk.close_session(session.id)


class Real:
    def __init__(self, hosts: str) -> None:
        self.hosts = hosts
        self.stores: list[MetaStore] = []

    async def session(self) -> Session:
        async with asyncio.timeout(GUARD_S):
            store = await MetaStore.connect(self.hosts)
        self.stores.append(store)
        return store

    async def end(self, session: Session) -> None:
        assert isinstance(session, MetaStore)
        async with asyncio.timeout(GUARD_S):
            await session.close()
        self.stores.remove(session)


@pytest.fixture
async def zookeeper(real_cluster: Cluster | None) -> AsyncIterator[ZooKeeperUnderTest]:
    if real_cluster is None:
        yield Simulated()
        return
    real = Real(real_cluster.topology.zk_connect)
    try:
        yield real
    finally:
        for store in list(real.stores):
            await real.end(store)


@pytest.fixture
def root() -> str:
    return f"/contract-{random.randrange(1 << 40):x}"


async def raises(kind: type[Exception], step: Callable[[], Awaitable[Any]]) -> str:
    with pytest.raises(kind) as caught:
        async with asyncio.timeout(GUARD_S):
            await step()
    return str(caught.value)


async def test_create_get_set_and_versions(zookeeper: ZooKeeperUnderTest, root: str) -> None:
    zk = await zookeeper.session()
    assert await zk.create(f"{root}/a", b"one", make_parents=True) == f"{root}/a"
    data, stat = await zk.get(f"{root}/a")
    assert (data, stat.version, stat.children) == (b"one", 0, 0)
    assert (await zk.set(f"{root}/a", b"two", version=0)).version == 1
    await raises(errors.BadVersionError, lambda: zk.set(f"{root}/a", b"x", version=0))
    assert (await zk.set(f"{root}/a", b"three", version=ANY_VERSION)).version == 2
    assert (await zk.get(f"{root}/a"))[0] == b"three"


async def test_missing_and_existing_nodes(zookeeper: ZooKeeperUnderTest, root: str) -> None:
    zk = await zookeeper.session()
    await raises(errors.NoNodeError, lambda: zk.create(f"{root}/no/parent"))
    await zk.create(f"{root}/no/parent", make_parents=True)
    await raises(errors.NodeExistsError, lambda: zk.create(f"{root}/no/parent"))
    assert await zk.exists(f"{root}/missing") is None
    await raises(errors.NoNodeError, lambda: zk.get(f"{root}/missing"))
    await raises(errors.NoNodeError, lambda: zk.set(f"{root}/missing", b"", version=-1))
    await raises(errors.NoNodeError, lambda: zk.delete(f"{root}/missing", version=-1))


async def test_delete_checks_version_and_children(zookeeper: ZooKeeperUnderTest, root: str) -> None:
    zk = await zookeeper.session()
    await zk.create(f"{root}/p/c", make_parents=True)
    await raises(errors.NotEmptyError, lambda: zk.delete(f"{root}/p", version=-1))
    await raises(errors.BadVersionError, lambda: zk.delete(f"{root}/p/c", version=3))
    await zk.delete(f"{root}/p/c", version=0)
    await zk.delete(f"{root}/p", version=-1)
    assert await zk.exists(f"{root}/p") is None


async def test_children_are_sorted_names(zookeeper: ZooKeeperUnderTest, root: str) -> None:
    zk = await zookeeper.session()
    await zk.create(root)
    for name in ("b", "a", "c"):
        await zk.create(f"{root}/{name}")
    assert await zk.children(root) == ["a", "b", "c"]
    assert (await zk.exists(root)).children == 3  # type: ignore[union-attr]


async def test_sequential_names_follow_the_parents_children_version(
    zookeeper: ZooKeeperUnderTest, root: str
) -> None:
    zk = await zookeeper.session()
    await zk.create(root)
    first = await zk.create(f"{root}/n-", sequential=True)
    second = await zk.create(f"{root}/n-", sequential=True)
    assert (first, second) == (f"{root}/n-0000000000", f"{root}/n-0000000001")
    await zk.create(f"{root}/plain")  # a create of any child counts
    await zk.delete(f"{root}/plain", version=-1)  # a delete does not
    assert await zk.create(f"{root}/n-", sequential=True) == f"{root}/n-0000000003"


async def test_a_transaction_is_all_or_nothing(zookeeper: ZooKeeperUnderTest, root: str) -> None:
    zk = await zookeeper.session()
    await zk.create(f"{root}/a", b"0", make_parents=True)
    ops = [
        Op("create", f"{root}/new", b"x"),
        Op("set", f"{root}/a", b"1", version=0),
        Op("check", f"{root}/a", version=7),
    ]
    said = await raises(errors.BadVersionError, lambda: zk.commit(ops))
    assert "op 2" in said
    assert await zk.exists(f"{root}/new") is None
    assert await zk.get(f"{root}/a") == (b"0", (await zk.get(f"{root}/a"))[1])
    assert (await zk.get(f"{root}/a"))[1].version == 0
    results = await zk.commit([Op("check", f"{root}/a", version=0), *ops[:2]])
    assert results[1] == f"{root}/new"
    assert (await zk.get(f"{root}/a"))[1].version == 1


async def test_ephemeral_nodes_go_with_their_session(
    zookeeper: ZooKeeperUnderTest, root: str
) -> None:
    owner, watcher = await zookeeper.session(), await zookeeper.session()
    await watcher.create(root)
    lock = await owner.create(f"{root}/lock-", b"me", ephemeral=True, sequential=True)
    await watcher.sync(root)  # another session's server may lag the leader until it syncs
    stat = await watcher.exists(lock)
    assert stat is not None and stat.ephemeral_owner != 0
    await raises(errors.MetadataError, lambda: owner.create(f"{lock}/child"))
    await zookeeper.end(owner)
    await watcher.sync(root)
    assert await watcher.exists(lock) is None
    assert await watcher.children(root) == []
