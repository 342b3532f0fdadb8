"""The region changes' lock through a lost ZooKeeper session, on the local cluster's real
ensemble: a run whose session ended takes the lock again in its new session before it goes
on (waiting out a lock its own lost session still holds), and stops instead when another run
took the lock meanwhile."""

from __future__ import annotations

import asyncio

import pytest

from core.errors import ConfigError, MetadataUnavailableError
from global_meta import MetaStore
from global_meta.faults import expire_session
from localcluster.controller import Cluster
from localcluster.probes import wait_until
from membership.changes import LOCK, ChangeLock, one_change_at_a_time

NEW_SESSION_WAIT_S = 30.0
STILL_WAITING_S = 1.5  # a keep() that could not end while the old holder stays


async def _lost_session(store: MetaStore) -> None:
    """Has ZooKeeper end the store's session; returns once the store has a new one."""
    before = store.session_id
    await expire_session(store)

    async def replaced() -> bool:
        try:
            return store.session_id not in (None, before) and await store.exists("/") is not None
        except MetadataUnavailableError:
            return False

    await wait_until("a new ZooKeeper session", replaced, NEW_SESSION_WAIT_S)


async def test_a_run_whose_session_was_lost_takes_the_lock_again(cluster: Cluster) -> None:
    async with await MetaStore.of(cluster.topology, session_timeout_s=4.0) as store:
        async with one_change_at_a_time(store, "remove test-region") as lock:
            first = store.session_id
            assert lock.session == first
            data, stat = await store.get(LOCK)
            assert (data, stat.ephemeral_owner) == (lock.token, first)
            assert data.startswith(b"remove test-region [")
            await _lost_session(store)
            assert await store.exists(LOCK) is None  # gone with the ended session
            await lock.keep()
            data, stat = await store.get(LOCK)
            assert (data, stat.ephemeral_owner) == (lock.token, store.session_id)
            assert lock.session == store.session_id != first
        assert await store.exists(LOCK) is None  # released by the run's end


async def test_a_lock_the_runs_lost_session_still_holds_is_waited_out(cluster: Cluster) -> None:
    """A session given up on the client's side lives on at the server until it expires
    there: its lock, which carries the run's token, is this run's and is waited out."""
    async with (
        await MetaStore.of(cluster.topology, session_timeout_s=4.0) as store,
        one_change_at_a_time(store, "remove test-region") as lock,
    ):
        await _lost_session(store)
        async with await MetaStore.of(cluster.topology) as lingering:  # the lost session
            await lingering.create(LOCK, lock.token, ephemeral=True)
            keeping = asyncio.ensure_future(lock.keep())
            await asyncio.sleep(STILL_WAITING_S)
            assert not keeping.done(), "took a lock another session holds"
        await asyncio.wait_for(keeping, NEW_SESSION_WAIT_S)  # it went with that session
        assert (await store.get(LOCK))[1].ephemeral_owner == store.session_id


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
