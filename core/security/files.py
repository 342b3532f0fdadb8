"""`globelog security init`: a deployment's token signing key, first admin token, shared
secrets (core/security/secrets.py), CA and host certificates, laid out as
core/security/settings.py describes. Idempotent: what exists and still serves is kept; an admin
token that expired or that the key on disk did not sign, and a host certificate near its end or
missing, are made again."""

from __future__ import annotations

import datetime
import fcntl
from collections.abc import Iterable
from pathlib import Path

from core.errors import UnauthenticatedError
from core.security import pki
from core.security.secrets import init_secrets
from core.security.settings import LEDGER_ROLE, SecuritySettings
from core.security.tokens import (
    Scope,
    issue,
    load_public_key,
    load_signing_key,
    new_signing_key,
    public_key_pem,
    signing_key_pem,
    verify,
)

ADMIN_SUBJECT = "admin"
ADMIN_TTL_S = 365 * 24 * 3600.0
ADMIN_RENEW_BEFORE_S = 7 * 24 * 3600.0  # an admin token this close to its end is renewed


def init_security(
    settings: SecuritySettings, now: float, hosts: Iterable[str] = (), deployment: str = ""
) -> list[Path]:
    """Makes what is missing under `settings.directory` (with TLS, a certificate for each of
    `hosts`); the files it wrote. Two at once (two clusters starting) take turns."""
    settings.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    with open(settings.directory / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _init(settings, now, hosts, deployment)


def _init(
    settings: SecuritySettings, now: float, hosts: Iterable[str], deployment: str
) -> list[Path]:
    written = []
    if settings.signing_key.is_file():
        key = load_signing_key(settings.signing_key.read_bytes(), str(settings.signing_key))
    else:
        key = new_signing_key()
        pki.write_private(settings.signing_key, signing_key_pem(key))
        written.append(settings.signing_key)
    if not settings.public_key.is_file() or settings.public_key.read_bytes() != public_key_pem(key):
        pki.write_public(settings.public_key, public_key_pem(key))
        written.append(settings.public_key)
    public = load_public_key(settings.public_key.read_bytes(), str(settings.public_key))
    try:
        admin = verify(settings.admin_token.read_text().strip(), public, now)
        current = admin.expires_at - now > ADMIN_RENEW_BEFORE_S
    except (OSError, UnauthenticatedError):
        current = False
    if not current:
        token, _ = issue(key, ADMIN_SUBJECT, Scope.everything(), now, ADMIN_TTL_S)
        pki.write_private(settings.admin_token, token.encode() + b"\n")
        written.append(settings.admin_token)
    written += init_secrets(settings)
    if settings.tls:
        written += _init_certificates(settings, now, sorted(set(hosts)), deployment)
    return written


def _init_certificates(
    settings: SecuritySettings, now_s: float, hosts: list[str], deployment: str
) -> list[Path]:
    now = datetime.datetime.fromtimestamp(now_s, datetime.UTC)
    written: list[Path] = []
    fresh = not (settings.ca_cert.is_file() and settings.ca_key.is_file())
    if not fresh:
        authority = pki.Authority.load(settings.ca_cert, settings.ca_key)
    else:
        authority = pki.Authority.make(deployment or settings.directory.name, now)
        authority.save(settings.ca_cert, settings.ca_key)
        written += [settings.ca_cert, settings.ca_key]
    wanted: list[tuple[Path, Path, str, str | None]] = [
        (settings.host_cert(h), settings.host_key(h), h, None) for h in hosts
    ]
    wanted.append(
        (settings.ledger_client_cert, settings.ledger_client_key, "ledger client", LEDGER_ROLE)
    )
    for cert_path, key_path, name, role in wanted:
        # a new CA signs them all again; a host's names may have changed
        renew = fresh or pki.needs_renewal(cert_path, now, None if role else name)
        bundle = settings.ledger_client_bundle if role is not None else settings.host_bundle(name)
        if renew or not key_path.is_file() or not bundle.is_file():
            cert, key = authority.issue(name, now, role=role)
            pki.write_host(cert_path, key_path, cert, key)
            pki.write_private(bundle, key + cert)
            written.append(cert_path)
    return written
