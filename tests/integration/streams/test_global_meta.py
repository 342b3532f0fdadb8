"""The kazoo adapter against the real 3-node ZooKeeper ensemble of the test cluster."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest

from core import errors
from global_meta import MetaStore, SessionState
from global_meta.faults import expire_session
from global_meta.store import Op
from localcluster.controller import Cluster
from tests.support import security
from tests.support.relays import Cuttable

WAIT_S = 15.0


@pytest.fixture
async def store(cluster: Cluster) -> AsyncIterator[MetaStore]:
    root = f"/tests/{uuid.uuid4().hex}"
    async with await MetaStore.of(cluster.topology) as setup:
        await setup.ensure_path(root)
    async with await MetaStore.connect(
        cluster.topology.zk_connect + root, security.zk_login(), session_timeout_s=4.0
    ) as chrooted:
        yield chrooted


async def test_versioned_compare_and_set(store: MetaStore) -> None:
    await store.create("/segment", b"v0")
    data, stat = await store.get("/segment")
    assert (data, stat.version) == (b"v0", 0)
    updated = await store.set("/segment", b"v1", version=stat.version)
    assert updated.version == 1
    with pytest.raises(errors.BadVersionError, match="set '/segment'") as caught:
        await store.set("/segment", b"stale", version=stat.version)
    assert caught.value.code == "metadata_bad_version" and not caught.value.retriable
    assert (await store.get("/segment"))[0] == b"v1"


async def test_a_batch_of_reads_answers_each_node_in_order_and_none_for_a_missing_one(
    store: MetaStore,
) -> None:
    assert await store.get_many([]) == []
    count = 700  # more than one chunk (GET_MANY_CHUNK)
    await asyncio.gather(*(store.create(f"/many-{i:03d}", f"v{i}".encode()) for i in range(count)))
    paths = [f"/many-{i:03d}" for i in range(count)]
    found = await store.get_many([*paths[:550], "/missing", *paths[550:]])
    assert found[550] is None
    read = [item for item in found if item is not None]
    assert [data for data, _ in read] == [f"v{i}".encode() for i in range(count)]
    assert all(stat.version == 0 for _, stat in read)


async def test_errors_are_translated(store: MetaStore) -> None:
    with pytest.raises(errors.NoNodeError, match="get '/missing': no such node"):
        await store.get("/missing")
    await store.create("/a/b", make_parents=True)
    with pytest.raises(errors.NodeExistsError):
        await store.create("/a/b")
    with pytest.raises(errors.NotEmptyError):
        await store.delete("/a", version=-1)
    await store.delete("/a", version=-1, recursive=True)
    assert await store.exists("/a") is None


async def test_sequential_and_ephemeral_nodes(cluster: Cluster, store: MetaStore) -> None:
    await store.ensure_path("/idgen")
    first = await store.create("/idgen/ID-", sequential=True)
    second = await store.create("/idgen/ID-", sequential=True)
    assert (
        first < second and first.startswith("/idgen/ID-") and len(first) == len("/idgen/ID-") + 10
    )
    owner = await store.create("/owner", b"me", ephemeral=True)
    stat = await store.exists(owner)
    assert stat is not None and stat.ephemeral_owner == store.session_id


async def test_atomic_commit_applies_all_or_nothing(store: MetaStore) -> None:
    await store.create("/x", b"1")
    await store.commit([Op("check", "/x", version=0), Op("create", "/y", b"2")])
    assert (await store.get("/y"))[0] == b"2"
    with pytest.raises(errors.BadVersionError, match="commit op 0"):
        await store.commit([Op("check", "/x", version=7), Op("create", "/z", b"3")])
    assert await store.exists("/z") is None


async def test_data_and_children_watches_are_async_iterators(store: MetaStore) -> None:
    await store.create("/w", b"0")
    values = store.watch_data("/w")
    data, _ = await asyncio.wait_for(anext_value(values), WAIT_S)
    assert data == b"0"
    await store.set("/w", b"1", version=0)
    assert (await asyncio.wait_for(anext_value(values), WAIT_S))[0] == b"1"
    await store.delete("/w", version=1)
    assert await asyncio.wait_for(values.__anext__(), WAIT_S) is None
    await values.aclose()

    await store.create("/kids")
    kids = store.watch_children("/kids")
    assert await asyncio.wait_for(kids.__anext__(), WAIT_S) == []
    await store.create("/kids/b")
    await store.create("/kids/a")
    seen = await asyncio.wait_for(kids.__anext__(), WAIT_S)
    while seen != ["a", "b"]:
        seen = await asyncio.wait_for(kids.__anext__(), WAIT_S)
    await kids.aclose()


async def anext_value(values: AsyncIterator[tuple[bytes, object] | None]) -> tuple[bytes, object]:
    value = await values.__anext__()
    assert value is not None
    return value


async def test_session_expiry_is_observed(store: MetaStore) -> None:
    events = store.session_events()
    waiter = asyncio.ensure_future(events.__anext__())
    await asyncio.sleep(0)
    before = store.session_id
    await store.create("/lease", ephemeral=True)
    await expire_session(store)
    states = [(await asyncio.wait_for(waiter, WAIT_S)).state]
    # The connection drops (suspended), the client may briefly re-attach to the old session,
    # then the server reports it gone (expired) and a new session connects.
    while SessionState.EXPIRED not in states or states[-1] is not SessionState.CONNECTED:
        states.append((await asyncio.wait_for(events.__anext__(), WAIT_S)).state)
    assert store.session_id != before
    assert await store.exists("/lease") is None  # the server dropped the expired ephemeral
    await events.aclose()


async def test_unreachable_ensemble_is_a_clear_retriable_error() -> None:
    with pytest.raises(errors.MetadataUnavailableError, match="no session within") as caught:
        await MetaStore.connect("127.0.0.1:1", security.zk_login(), connect_timeout_s=1.0)
    assert caught.value.retriable


@pytest.mark.parametrize("cut_off", [True, False], ids=["isolated", "electing"])
async def test_a_session_is_given_up_only_when_the_isolation_check_says_cut_off(
    cluster: Cluster, cut_off: bool
) -> None:
    """With no server for a session timeout, a store gives its session up (EXPIRED while
    the cut lasts) only if its isolation check says this process is cut off from most of the
    cluster; otherwise (an election) it keeps waiting for a server. Either way, once a
    server answers again the store ends up with a working session."""
    session_timeout_s = 1.0
    node = cluster.topology.zk_nodes_for("us-east")[0].client.address
    relay = Cuttable(node)
    checks: list[float] = []

    async def isolation_check() -> bool:
        checks.append(asyncio.get_running_loop().time())
        return cut_off

    async with relay as address:
        store = await MetaStore.connect(
            address, security.zk_login(), session_timeout_s=session_timeout_s
        )
        try:
            store.isolation_check = isolation_check
            events = store.session_events()
            relay.cut()
            seen: list[SessionState] = []

            async def watch() -> None:
                while True:
                    seen.append((await anext(events)).state)

            watcher = asyncio.get_running_loop().create_task(watch())
            await asyncio.sleep(2 * session_timeout_s + 2.5)  # the grace, a check, a re-check
            assert checks, "the store never asked whether it is cut off"
            if cut_off:
                assert SessionState.EXPIRED in seen, seen
                assert len(checks) == 1
            else:
                assert SessionState.EXPIRED not in seen, seen
                assert len(checks) >= 2, "an election keeps the store asking, one timeout apart"
            relay.is_cut = False
            async with asyncio.timeout(30):
                while True:  # a working session again (the old one, or a new one)
                    try:
                        await store.get("/")
                        break
                    except errors.MetadataError:
                        await asyncio.sleep(0.2)
            watcher.cancel()
        finally:
            await store.close()
