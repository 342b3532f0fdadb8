"""The test deployment's identity: one signing key and admin token per test process, made once,
shared by every cluster the process starts (tests/support/topologies.py points each topology
at it). Clients find the admin token through GLOBELOG_TOKEN_FILE, as an operator's shell does;
raw HTTP in tests sends `auth_headers()`."""

from __future__ import annotations

import asyncio
import os
import ssl
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from core.security.credentials import (
    CA_FILE_ENV,
    TOKEN_ENV,
    TOKEN_FILE_ENV,
    bookie_tls,
    client_ssl,
    read_token_file,
)
from core.security.credentials import auth_headers as _auth_headers
from core.security.files import init_security
from core.security.secrets import ZkLogin
from core.security.secrets import zk_login as _zk_login
from core.security.settings import SecuritySettings
from ledger.connections.bookie_pool import BookieClientConfig
from ledger.connections.connection import ConnectionConfig

WORKER = os.environ.get("PYTEST_XDIST_WORKER", "main")
SECURITY = SecuritySettings(
    Path(tempfile.gettempdir()) / f"globelog-test-security-{os.getuid()}-{WORKER}"
)


def set_up() -> None:
    init_security(SECURITY, time.time(), ["127.0.0.1"], "tests")
    os.environ.pop(TOKEN_ENV, None)  # a developer's own token would be sent instead
    os.environ[TOKEN_FILE_ENV] = str(SECURITY.admin_token)
    os.environ[CA_FILE_ENV] = str(SECURITY.ca_cert)


def zk_login() -> ZkLogin:
    """The test deployment's ZooKeeper login (for sessions with a node or relay directly)."""
    return _zk_login(SECURITY)


def bookie_config(**connection: Any) -> BookieClientConfig:
    """A bookie client's config that speaks to the test cluster's bookies as globelog does
    (TLS with its client certificate), with `connection` settings over the defaults."""
    return BookieClientConfig(connection=ConnectionConfig(tls=bookie_tls(SECURITY), **connection))


def admin_token() -> str:
    return read_token_file(SECURITY.admin_token)


def auth_headers() -> dict[str, str]:
    return _auth_headers(admin_token())


def client_session(headers: dict[str, str] | None = None, **options: Any) -> aiohttp.ClientSession:
    """A session trusting the test CA for HTTPS, sending `headers` (the admin token's by
    default; {} for none)."""
    return aiohttp.ClientSession(
        headers=auth_headers() if headers is None else headers,
        connector=aiohttp.TCPConnector(ssl=client_ssl()),
        **options,
    )


def client_ssl_context() -> ssl.SSLContext:
    """The test CA's client context (for clients other than aiohttp's)."""
    context = client_ssl()
    assert isinstance(context, ssl.SSLContext), "the test CA is set up by conftest"
    return context


async def raw_connection(url: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A bare connection to the proxy at `url` (TLS when https), for clients that misbehave
    below HTTP."""
    parts = urlsplit(url)
    tls = client_ssl() if parts.scheme == "https" else None
    return await asyncio.open_connection(parts.hostname, parts.port, ssl=tls)


async def post_following(http: aiohttp.ClientSession, url: str, **options: Any) -> tuple[int, Any]:
    """POST `url`, following a proxy's 307 to the owner as the clients do (aiohttp would drop
    the token on a redirect to another host or port, as it should): (status, JSON body)."""
    for _ in range(4):
        async with http.post(url, allow_redirects=False, **options) as answer:
            body = await answer.json(content_type=None)
            if answer.status != 307:
                return answer.status, body
            url = answer.headers["Location"]
    raise AssertionError(f"POST {url}: more than 3 redirects")
