"""Readiness and health probes: ZooKeeper serving, bookies registered, toxiproxy answering."""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp

from core.errors import ClusterError
from core.security.credentials import auth_headers, bookie_tls, client_ssl, default_token
from core.security.settings import SecuritySettings
from core.topology import Endpoint
from global_meta.homing import server_mode

PROBE_TIMEOUT_S = 2.0
POLL_INTERVAL_S = 0.1


async def zookeeper_mode(endpoint: Endpoint, tls: ssl.SSLContext | None) -> str | None:
    """The server's mode (leader, follower, standalone) from `srvr` (over TLS when its port
    is: `zookeeper_tls`), or None if not serving."""
    return await server_mode(endpoint.host, endpoint.port, tls, PROBE_TIMEOUT_S)


def zookeeper_tls(security: SecuritySettings) -> ssl.SSLContext | None:
    """What ZooKeeper's client ports are reached with: the context globelog's clients reach
    bookies with (the deployment's CA, its client certificate; made once), or None when the
    deployment has TLS off."""
    return bookie_tls(security)


def operator_session(
    timeout: aiohttp.ClientTimeout | None = None,
    limit: int = 100,
    trace: aiohttp.TraceConfig | None = None,
) -> aiohttp.ClientSession:
    """An HTTP session with this process's token and CA (core/security/credentials.py), as the
    tools of the local cluster, the failover run and the benchmarks talk to proxies; its
    requests traced by `trace` when given."""
    return aiohttp.ClientSession(
        timeout=timeout or aiohttp.ClientTimeout(total=300),
        headers=auth_headers(default_token()),
        connector=aiohttp.TCPConnector(ssl=client_ssl(), limit=limit),
        trace_configs=None if trace is None else [trace],
    )


async def service_health(
    url: str,
    token: str | None = None,
    tls: ssl.SSLContext | bool = True,
    http: aiohttp.ClientSession | None = None,
) -> tuple[bool, str]:
    """The /v1/health of the globelog service at `url`, asked with `token` (an `observe`
    scope) and verified with `tls` over HTTPS: (answering, what it said or why not). Over
    `http` when given (its connections kept: a prober asking again and again), else over a
    session of its own."""
    if http is None:
        async with probe_session(tls) as own:
            return await service_health(url, token, tls, own)
    try:
        async with (
            asyncio.timeout(PROBE_TIMEOUT_S),
            http.get(f"{url}/v1/health", headers=auth_headers(token)) as answer,
        ):
            body = await answer.json()
            if answer.status != 200:
                refused = f": {body.get('message')}" if answer.status in (401, 403) else ""
                return False, f"health answered {answer.status}{refused}"
            streams = len(body.get("owned", body.get("streams", [])))
            if body.get("state") == "degraded":
                return False, f"{DEGRADED}, {streams} stream(s): {_not_following(body)}"
            return True, f"serving, {streams} stream(s)"
    except (aiohttp.ClientError, TimeoutError, ValueError) as err:
        return False, f"not serving: {type(err).__name__}"


def probe_session(tls: ssl.SSLContext | bool = True) -> aiohttp.ClientSession:
    """An HTTP session for `service_health`, each request bounded by PROBE_TIMEOUT_S."""
    return aiohttp.ClientSession(
        timeout=aiohttp.ClientTimeout(total=PROBE_TIMEOUT_S),
        connector=aiohttp.TCPConnector(ssl=tls),
    )


DEGRADED = "degraded"  # a proxy that answers but has followers not following
HEALTH_NAMES_MAX = 5  # streams and followers a status line names; the rest are counted


def _not_following(body: dict[str, Any]) -> str:
    """What a degraded health answer says is not following: names, states and causes."""
    streams = body.get("not_following", {})
    followers = {
        name: what
        for name, what in body.get("followers", {}).items()
        if isinstance(what, dict) and what.get("state") not in ("running", "finished")
    }
    found = [(f"stream {name}", what) for name, what in streams.items() if isinstance(what, dict)]
    found += list(followers.items())
    parts = [
        f"{name} {what.get('state')} for {what.get('for_s')} s "
        f"({what.get('restarts')} restarts; {what.get('last_error')})"
        for name, what in found[:HEALTH_NAMES_MAX]
    ]
    # a read proxy names at most some of its streams; the count covers them all
    total = int(body.get("not_following_count", len(streams))) + len(followers)
    if total > len(parts):
        parts.append(f"and {total - len(parts)} more")
    return "; ".join(parts) or "not following"


async def wait_until(
    what: str,
    check: Callable[[], Awaitable[bool]],
    timeout_s: float,
    on_timeout: Callable[[], str] = lambda: "",
) -> float:
    """Polls `check` until it holds; returns the seconds waited or raises ClusterError."""
    started = time.monotonic()
    while True:
        if await check():
            return time.monotonic() - started
        if time.monotonic() - started > timeout_s:
            detail = on_timeout()
            raise ClusterError(f"{what}: not ready after {timeout_s:.0f} s{detail}")
        await asyncio.sleep(POLL_INTERVAL_S)


def log_lines(path: str, tail_bytes: int = 8192) -> list[str]:
    """The lines of the last `tail_bytes` of a process log ([] when it cannot be read)."""
    try:
        with open(path, "rb") as file:
            file.seek(0, 2)
            file.seek(max(0, file.tell() - tail_bytes))
            return file.read().decode(errors="replace").splitlines()
    except OSError:
        return []


def log_tail(path: str, lines: int = 15) -> str:
    """The last lines of a process log, to put into a startup failure message."""
    return "\n  | ".join(["", *log_lines(path)[-lines:]])
