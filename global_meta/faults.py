"""Fault injection on metadata sessions, for tests and operators' failover drills."""

from __future__ import annotations

import asyncio

from kazoo.client import KazooClient

from core import errors
from global_meta.store import MetaStore


async def expire_session(store: MetaStore, timeout_s: float = 10.0) -> None:
    """Makes ZooKeeper itself expire `store`'s session (its ephemeral nodes disappear).

    A second client joins the same session with its id and password and closes it, so the
    server ends the session for real (a client-side simulation would keep the ephemerals).
    """
    credentials = store.session_credentials
    if credentials is None:
        raise errors.MetadataUnavailableError("expire session: the store has no session now")

    def run() -> None:
        intruder = KazooClient(hosts=store.hosts, client_id=credentials)
        intruder.start(timeout_s)
        intruder.stop()
        intruder.close()

    async with asyncio.timeout(timeout_s):
        await asyncio.to_thread(run)
