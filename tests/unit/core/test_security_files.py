"""`globelog security init`'s files: made once and kept, renewed when they no longer serve; the
CA's certificates verify for their host only; a renewed certificate is served without a
restart."""

from __future__ import annotations

import asyncio
import datetime
import ssl
import stat
import time
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import NameOID

from core.errors import ConfigError
from core.security import pki
from core.security.files import init_security
from core.security.secrets import (
    ZK_USER,
    jaas_conf,
    ledger_password,
    ledger_password_file,
    zk_jaas_file,
    zk_login,
    zk_password_file,
)
from core.security.settings import LEDGER_ROLE, SecuritySettings
from core.security.tokens import load_public_key, verify

pytestmark = pytest.mark.unit
NOW = time.time()


def test_init_makes_every_file_once_private_and_keeps_them(tmp_path: Path) -> None:
    settings = SecuritySettings(tmp_path / "sec")
    written = init_security(settings, NOW, ["127.0.0.1", "proxy.a.test"], "t")
    expected = {
        settings.signing_key,
        settings.public_key,
        settings.admin_token,
        settings.ca_cert,
        settings.ca_key,
        settings.host_cert("127.0.0.1"),
        settings.host_cert("proxy.a.test"),
        settings.ledger_client_cert,
        zk_password_file(settings),
        zk_jaas_file(settings),
        ledger_password_file(settings),
    }
    assert set(written) == expected
    for secret in (
        settings.signing_key,
        settings.admin_token,
        settings.ca_key,
        zk_password_file(settings),
        zk_jaas_file(settings),
        ledger_password_file(settings),
    ):
        assert stat.S_IMODE(secret.stat().st_mode) == 0o600, secret
    assert init_security(settings, NOW, ["127.0.0.1", "proxy.a.test"], "t") == []
    public = load_public_key(settings.public_key.read_bytes(), "pub")
    admin = verify(settings.admin_token.read_text().strip(), public, NOW)
    assert admin.subject == "admin" and admin.scope.allows("admin")
    assert not list(settings.directory.glob(".*.partial*")), "no temporary file is left"


def test_a_new_key_or_a_new_ca_makes_what_depends_on_it_again(tmp_path: Path) -> None:
    settings = SecuritySettings(tmp_path / "sec")
    init_security(settings, NOW, ["127.0.0.1"], "t")
    settings.signing_key.unlink()
    settings.ca_key.unlink()
    written = init_security(settings, NOW, ["127.0.0.1"], "t")
    assert settings.admin_token in written, "the old admin token's key is gone"
    assert settings.host_cert("127.0.0.1") in written, "the new CA signs the host again"
    near_end = NOW + (pki.HOST_DAYS - pki.RENEW_BEFORE_DAYS + 1) * 86400
    assert settings.host_cert("127.0.0.1") in init_security(settings, near_end, ["127.0.0.1"])


def test_tls_off_makes_no_certificates(tmp_path: Path) -> None:
    settings = SecuritySettings(tmp_path / "sec", tls=False)
    init_security(settings, NOW, ["127.0.0.1"])
    assert not settings.ca_cert.exists()


async def _handshake(server: ssl.SSLContext, client: ssl.SSLContext, name: str) -> bytes:
    """One TLS connection on loopback; the certificate the server presented (DER)."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.close()

    listening = await asyncio.start_server(answer, "127.0.0.1", 0, ssl=server)
    port = listening.sockets[0].getsockname()[1]
    try:
        _, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=client, server_hostname=name
        )
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        writer.close()
        return bytes(der)
    finally:
        listening.close()


async def test_a_host_certificate_verifies_for_its_host_against_its_ca_only(
    tmp_path: Path,
) -> None:
    ours, theirs = SecuritySettings(tmp_path / "ours"), SecuritySettings(tmp_path / "theirs")
    init_security(ours, NOW, ["127.0.0.1"], "ours")
    init_security(theirs, NOW, ["127.0.0.1"], "theirs")
    server = pki.server_context(ours.host_cert("127.0.0.1"), ours.host_key("127.0.0.1"))
    await _handshake(server, pki.client_context(ours.ca_cert), "127.0.0.1")
    with pytest.raises(ssl.SSLCertVerificationError, match="certificate verify failed"):
        await _handshake(server, pki.client_context(theirs.ca_cert), "127.0.0.1")
    # a loopback address's certificate also names localhost (Java clients may check that)
    await _handshake(server, pki.client_context(ours.ca_cert), "localhost")
    with pytest.raises(ssl.SSLCertVerificationError, match=r"mismatch|match"):
        await _handshake(server, pki.client_context(ours.ca_cert), "proxy.elsewhere.test")


async def test_a_renewed_certificate_is_served_without_a_restart(tmp_path: Path) -> None:
    settings = SecuritySettings(tmp_path / "sec")
    init_security(settings, NOW, ["127.0.0.1"])
    cert, key = settings.host_cert("127.0.0.1"), settings.host_key("127.0.0.1")
    served = pki.ReloadingCertificate(cert, key)
    client = pki.client_context(settings.ca_cert)
    before = await _handshake(served.context, client, "127.0.0.1")
    assert not served.check()
    authority = pki.Authority.load(settings.ca_cert, settings.ca_key)
    now = datetime.datetime.now(datetime.UTC)
    pki.write_host(cert, key, *authority.issue("127.0.0.1", now))
    assert served.check() and served.reloads == 1
    after = await _handshake(served.context, client, "127.0.0.1")
    assert after != before


def test_a_missing_certificate_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="security init"):
        pki.server_context(tmp_path / "none.pem", tmp_path / "none.key")


def test_secrets_are_random_kept_and_the_jaas_file_follows_the_password(tmp_path: Path) -> None:
    one, two = SecuritySettings(tmp_path / "one"), SecuritySettings(tmp_path / "two")
    init_security(one, NOW)
    init_security(two, NOW)
    assert ledger_password(one) != ledger_password(two), "every deployment its own"
    assert zk_login(one).password != zk_login(two).password
    assert len(ledger_password(one)) >= 32 and zk_login(one).user == ZK_USER
    jaas = zk_jaas_file(one).read_text()
    assert jaas == jaas_conf(zk_login(one)) and f'user_{ZK_USER}="' in jaas
    assert "password" not in repr(zk_login(one)) and zk_login(one).password not in repr(
        zk_login(one)
    )
    zk_password_file(one).write_text("another-password-of-some-length\n")
    written = init_security(one, NOW)
    assert written == [zk_jaas_file(one)], "a changed password is kept; JAAS made again"
    assert "another-password-of-some-length" in zk_jaas_file(one).read_text()


@pytest.mark.parametrize("content", ["", "short", 'quo"te-in-a-long-secret'])
def test_a_malformed_or_missing_secret_is_a_clear_error(tmp_path: Path, content: str) -> None:
    settings = SecuritySettings(tmp_path / "sec")
    with pytest.raises(ConfigError, match="security init"):
        ledger_password(settings)
    ledger_password_file(settings).parent.mkdir(parents=True)
    ledger_password_file(settings).write_text(content)
    with pytest.raises(ConfigError, match="expected one secret of 16 or more printable"):
        ledger_password(settings)


def test_the_ledger_client_certificate_carries_the_role_bookies_authorize(tmp_path: Path) -> None:
    settings = SecuritySettings(tmp_path / "sec")
    init_security(settings, NOW, ["127.0.0.1"], "t")
    cert = x509.load_pem_x509_certificate(settings.ledger_client_cert.read_bytes())
    units = cert.subject.get_attributes_for_oid(NameOID.ORGANIZATIONAL_UNIT_NAME)
    assert [u.value for u in units] == [f"0:{LEDGER_ROLE}"]
    host = x509.load_pem_x509_certificate(settings.host_cert("127.0.0.1").read_bytes())
    assert not host.subject.get_attributes_for_oid(NameOID.ORGANIZATIONAL_UNIT_NAME)
    assert stat.S_IMODE(settings.ledger_client_key.stat().st_mode) == 0o600
    context = pki.mutual_context(
        settings.ca_cert, settings.ledger_client_cert, settings.ledger_client_key
    )
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
