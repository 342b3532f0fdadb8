"""The region changes' lock through a lost ZooKeeper session, on the local cluster's real
ensemble: a run whose session ZooKeeper ended takes the lock again in its new session before
it goes on, and stops instead when another run took the lock meanwhile."""

from __future__ import annotations

import pytest

from core.errors import ConfigError
from global_meta import MetaStore
from global_meta.faults import expire_session
from localcluster.controller import Cluster
from localcluster.probes import wait_until
from membership.changes import LOCK, ChangeLock, one_change_at_a_time

NEW_SESSION_WAIT_S = 30.0


async def _lost_session(store: MetaStore) -> int | None:
    """Has ZooKeeper end the store's session; returns once the store has a new one."""
    before = store.session_id
    await expire_session(store)

    async def replaced() -> bool:
        return store.session_id not in (None, before) and await store.exists("/") is not None

    await wait_until("a new ZooKeeper session", replaced, NEW_SESSION_WAIT_S)
    return before


async def test_a_run_whose_session_was_lost_takes_the_lock_again(cluster: Cluster) -> None:
    async with (
        await MetaStore.of(cluster.topology, session_timeout_s=4.0) as store,
        one_change_at_a_time(store, "remove test-region") as lock,
    ):
        first = store.session_id
        assert lock.session == first
        assert (await store.get(LOCK))[1].ephemeral_owner == first
        await _lost_session(store)
        assert await store.exists(LOCK) is None  # gone with the ended session
        await lock.keep()
        data, stat = await store.get(LOCK)
        assert (data, stat.ephemeral_owner) == (b"remove test-region", store.session_id)
        assert lock.session == store.session_id != first
    assert await _lock_gone(cluster)  # released at the end of the run


async def test_a_lock_another_run_took_meanwhile_stops_the_run(cluster: Cluster) -> None:
    async with (
        await MetaStore.of(cluster.topology, session_timeout_s=4.0) as store,
        await MetaStore.of(cluster.topology) as other,
    ):
        taker = ChangeLock(other, "add test-region")
        async with one_change_at_a_time(store, "remove test-region") as lock:
            await _lost_session(store)
            await taker.take(wait_s=0.0)
            with pytest.raises(ConfigError, match=r"another region change took the lock"):
                await lock.keep()
        # the stopped run's end leaves the other run's lock alone
        assert (await other.get(LOCK))[1].ephemeral_owner == other.session_id
        await taker.release()
        assert await other.exists(LOCK) is None


async def _lock_gone(cluster: Cluster) -> bool:
    async with await MetaStore.of(cluster.topology) as store:
        return await store.exists(LOCK) is None
