"""Fault injection on metadata sessions, for tests and operators' failover drills."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

from kazoo.client import KazooClient

from core import errors
from core.security.secrets import ZkLogin
from global_meta.store import MetaStore, SessionState, kazoo_login, retry_dropped_logins


async def expire_session(store: MetaStore, timeout_s: float = 10.0) -> None:
    """Makes ZooKeeper itself expire `store`'s session (its ephemeral nodes disappear).

    A second client joins the same session with its id and password and closes it, so the
    server ends the session for real (a client-side simulation would keep the ephemerals).
    """
    credentials = store.session_credentials
    if credentials is None:
        raise errors.MetadataUnavailableError("expire session: the store has no session now")
    await expire_session_of(store.hosts, store.login, credentials, timeout_s)


async def expire_session_of(
    hosts: str, login: ZkLogin | None, credentials: tuple[int, bytes], timeout_s: float = 10.0
) -> None:
    """Makes ZooKeeper expire the session with these credentials (another process's),
    joining it logged in as `login`."""

    def run() -> None:
        intruder = KazooClient(hosts=hosts, client_id=credentials, **kazoo_login(login))
        retry_dropped_logins(intruder)
        try:
            intruder.start(timeout_s)
            intruder.stop()
        finally:
            intruder.close()

    try:
        async with asyncio.timeout(timeout_s + 1):
            await asyncio.to_thread(run)
    except TimeoutError as err:
        raise errors.MetadataUnavailableError(
            f"expire session {credentials[0]:#x}: no ZooKeeper server answered in {timeout_s} s"
        ) from err


async def publish_session(store: MetaStore, path: Path) -> None:
    """Keeps `path` holding `store`'s current session id and password (mode 0600), rewritten
    at every new session, so an operator's drill (`globelog cluster expire-session`) can make
    ZooKeeper expire it. Runs until cancelled."""

    def write() -> None:
        credentials = store.session_credentials
        if credentials is None:
            return
        session_id, password = credentials
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(path.name + ".partial")
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            json.dump({"session_id": session_id, "password": password.hex()}, file)
        os.replace(partial, path)

    await asyncio.to_thread(write)
    async for event in store.session_events():
        if event.state is SessionState.CONNECTED:
            await asyncio.to_thread(write)


def read_session_file(path: Path) -> tuple[int, bytes]:
    """The credentials `publish_session` wrote; ConfigError saying what is wrong otherwise."""
    try:
        body = json.loads(path.read_text(encoding="utf-8"))
        return int(body["session_id"]), bytes.fromhex(body["password"])
    except OSError as err:
        raise errors.ConfigError(f"session file {path}: cannot be read: {err.strerror}") from err
    except (ValueError, KeyError, TypeError) as err:
        raise errors.ConfigError(
            f"session file {path}: expected JSON {{session_id, password hex}}: {err}"
        ) from err
