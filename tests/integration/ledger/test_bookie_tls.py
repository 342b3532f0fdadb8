"""Bookies serve globelog's processes over TLS only (docs/security.md), on the real bookies of
the test cluster: a client in clear is refused every request (v3 and v2 alike); a TLS client
without a certificate, or with one from another CA, or of another role, is refused; a client
that does not trust the bookie's CA refuses the bookie; the deployment's client is served."""

from __future__ import annotations

import asyncio
import datetime
import ssl
from pathlib import Path

import pytest

from core.routes import publish_topology
from core.security import pki
from core.security.settings import LEDGER_ROLE
from ledger.codecs.entry import DigestType, EntryCodec, master_key
from ledger.connections.bookie_client import BookieClient
from ledger.connections.bookie_pool import BookieClientConfig
from ledger.connections.connection import ConnectionConfig
from ledger.errors import (
    BookieConnectionError,
    BookieUnavailableError,
    UnauthorizedError,
)
from localcluster.controller import Cluster
from tests.support import security
from tests.support.security import SECURITY

GUARD_S = 20.0
PASSWORD = b"tls-test"
NOW = datetime.datetime.now(datetime.UTC)


def client(cluster: Cluster, tls: ssl.SSLContext | None) -> tuple[BookieClient, str]:
    bookie = cluster.topology.bookies[2]
    config = BookieClientConfig(connection=ConnectionConfig(tls=tls, connect_timeout_s=10.0))
    published = publish_topology(cluster.topology)
    return BookieClient.for_region(published, bookie.region, config), bookie.bookie_id


async def add_one(client: BookieClient, bookie: str) -> None:
    ledger_id = 7_000_000_000 + int(NOW.timestamp()) % 1_000_000
    packet = EntryCodec(ledger_id, DigestType.CRC32C, PASSWORD).encode_entry(0, -1, 1, b"x")
    await asyncio.wait_for(
        client.add_entry(bookie, ledger_id, 0, master_key(PASSWORD), packet), GUARD_S
    )


def foreign_context(tmp_path: Path, role: str | None, *, same_ca: bool) -> ssl.SSLContext:
    """A client presenting a certificate of `role`, signed by the deployment's CA or by
    another one, trusting the deployment's CA for the bookie."""
    authority = (
        pki.Authority.load(SECURITY.ca_cert, SECURITY.ca_key)
        if same_ca
        else pki.Authority.make("an intruder's", NOW)
    )
    cert, key = authority.issue("intruder", NOW, role=role)
    pki.write_host(tmp_path / "c.pem", tmp_path / "c.key", cert, key)
    return pki.mutual_context(SECURITY.ca_cert, tmp_path / "c.pem", tmp_path / "c.key")


async def test_the_deployments_client_is_served_over_tls(cluster: Cluster) -> None:
    bookies, bookie = client(cluster, security.bookie_config().connection.tls)
    async with bookies:
        await add_one(bookies, bookie)
        info = await asyncio.wait_for(bookies.get_bookie_info(bookie), GUARD_S)
        assert info.free_disk_space is not None


async def test_a_client_in_clear_is_refused_every_request(cluster: Cluster) -> None:
    bookies, bookie = client(cluster, None)
    async with bookies:
        with pytest.raises(UnauthorizedError):
            await add_one(bookies, bookie)
        with pytest.raises(UnauthorizedError):
            await asyncio.wait_for(bookies.read_entry(bookie, 1, 0), GUARD_S)
        # v2 (batched reads): the bookie closes the connection
        with pytest.raises(BookieConnectionError):
            await asyncio.wait_for(bookies.batch_read(bookie, 1, 0, 10), GUARD_S)


@pytest.mark.parametrize(
    ("role", "same_ca"),
    [(LEDGER_ROLE, False), ("someone-else", True), (None, True)],
    ids=["foreign-ca", "unauthorized-role", "no-role"],
)
async def test_a_client_certificate_the_bookie_does_not_authorize_is_refused(
    cluster: Cluster, tmp_path: Path, role: str | None, same_ca: bool
) -> None:
    bookies, bookie = client(cluster, foreign_context(tmp_path, role, same_ca=same_ca))
    async with bookies:
        # a foreign CA fails the handshake; an unauthorized role gets EUA after it
        with pytest.raises((BookieConnectionError, UnauthorizedError)):
            await add_one(bookies, bookie)


async def test_a_tls_client_without_a_certificate_is_refused(cluster: Cluster) -> None:
    bookies, bookie = client(cluster, pki.client_context(SECURITY.ca_cert))
    async with bookies:
        with pytest.raises((BookieConnectionError, UnauthorizedError)):
            await add_one(bookies, bookie)


async def test_a_bookie_with_a_certificate_of_another_ca_is_refused(
    cluster: Cluster, tmp_path: Path
) -> None:
    other = pki.Authority.make("another deployment", NOW)
    other.save(tmp_path / "other-ca.pem", tmp_path / "other-ca.key")
    context = pki.mutual_context(
        tmp_path / "other-ca.pem", SECURITY.ledger_client_cert, SECURITY.ledger_client_key
    )
    bookies, bookie = client(cluster, context)
    async with bookies:
        with pytest.raises(BookieUnavailableError, match="TLS handshake failed"):
            await add_one(bookies, bookie)
