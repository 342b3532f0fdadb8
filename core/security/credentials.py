"""The token a client sends and the CA it trusts, and where they come from when the caller
names none:

    GLOBELOG_TOKEN        the token itself
    GLOBELOG_TOKEN_FILE   a file holding it
    GLOBELOG_CA_FILE      the deployment's CA certificate (PEM) that proxies' certificates
                          are verified against
    else the deployment's admin token and CA (`security.dir`), on a host that holds them

Clients (`ProxyClient`, `ReadClient`, the CLI, the Spark sink, the local cluster's probes) send
the token as `Authorization: Bearer <token>` and verify HTTPS proxies against the CA.
"""

from __future__ import annotations

import functools
import os
import ssl
from pathlib import Path

from core.errors import ConfigError
from core.security.pki import client_context, mutual_context
from core.security.settings import SecuritySettings
from core.security.tokens import TOKEN_CHARS_MAX

TOKEN_ENV = "GLOBELOG_TOKEN"
TOKEN_FILE_ENV = "GLOBELOG_TOKEN_FILE"
CA_FILE_ENV = "GLOBELOG_CA_FILE"


def read_token_file(path: Path, what: str = "token file") -> str:
    try:
        text = path.read_text(encoding="ascii", errors="replace")[: TOKEN_CHARS_MAX + 1]
    except OSError as err:
        raise ConfigError(f"{what} {path}: {err.strerror}") from None
    token = text.strip()
    if not token or len(token) > TOKEN_CHARS_MAX:
        raise ConfigError(f"{what} {path}: expected one token, found {len(text)} characters")
    return token


def default_token(security: SecuritySettings | None = None) -> str | None:
    """The token of this process's environment, else the admin token of `security` if this
    host holds it, else None (a deployment without tokens)."""
    return TokenSource.default(security).token()


class TokenSource:
    """The token a long-lived client sends: one given, or one kept in a file, which is read
    again whenever the file changes, so a token renewed in place (written, or renamed over
    the old one) is sent from the next request on, without a restart. A file that cannot be
    read while it changes leaves the last token in use; one never read is a ConfigError."""

    def __init__(self, token: str | None = None, path: Path | None = None, what: str = "") -> None:
        self._token = token
        self._path = path
        self._what = what or "token file"
        self._seen: tuple[int, int, int] | None = None

    @classmethod
    def default(cls, security: SecuritySettings | None = None) -> TokenSource:
        """GLOBELOG_TOKEN, else the file GLOBELOG_TOKEN_FILE names, else the admin token of
        `security` if this host holds it, else none (a deployment without tokens)."""
        token = os.environ.get(TOKEN_ENV, "").strip()
        if token:
            return cls(token)
        named = os.environ.get(TOKEN_FILE_ENV, "").strip()
        if named:
            return cls(path=Path(named), what=TOKEN_FILE_ENV).loaded()
        if security is not None and security.tokens and security.admin_token.is_file():
            return cls(path=security.admin_token, what="admin token").loaded()
        return cls()

    def loaded(self) -> TokenSource:
        """This source with its file read now: ConfigError at once if it cannot be."""
        self.token()
        return self

    def token(self) -> str | None:
        if self._path is None:
            return self._token
        try:
            stat = self._path.stat()
            seen = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
            if seen != self._seen:
                self._token, self._seen = read_token_file(self._path, self._what), seen
        except OSError as err:
            if self._token is None:
                raise ConfigError(f"{self._what} {self._path}: {err.strerror}") from None
        except ConfigError:
            if self._token is None:
                raise
        return self._token

    def headers(self) -> dict[str, str]:
        return auth_headers(self.token())


def auth_headers(token: str | None) -> dict[str, str]:
    return {} if token is None else {"Authorization": f"Bearer {token}"}


def adopt_operator_credentials(security: SecuritySettings) -> None:
    """Makes the deployment's admin token and CA this process's defaults (and its children's),
    unless the environment names them already or this host holds none: the choice of the
    operator's tools (the `globelog` command, and `cluster up`, which made them), never of a
    client library's."""
    named = os.environ.get(TOKEN_ENV, "").strip() or os.environ.get(TOKEN_FILE_ENV, "").strip()
    if not named and security.tokens and security.admin_token.is_file():
        os.environ[TOKEN_FILE_ENV] = str(security.admin_token)
    if not os.environ.get(CA_FILE_ENV, "").strip() and security.tls and security.ca_cert.is_file():
        os.environ[CA_FILE_ENV] = str(security.ca_cert)


@functools.lru_cache(maxsize=8)
def _context(ca_path: str) -> ssl.SSLContext:
    return client_context(Path(ca_path))


def client_ssl(security: SecuritySettings | None = None) -> ssl.SSLContext | bool:
    """What a client verifies HTTPS proxies with: the CA GLOBELOG_CA_FILE names, else the CA of
    `security` if this host holds it, else True (the system's CAs: a proxy behind a public
    certificate)."""
    named = os.environ.get(CA_FILE_ENV, "").strip()
    if named:
        return _context(named)
    if security is not None and security.tls and security.ca_cert.is_file():
        return _context(str(security.ca_cert))
    return True


@functools.lru_cache(maxsize=8)
def bookie_tls(security: SecuritySettings) -> ssl.SSLContext | None:
    """What a ledger client speaks to bookies with: TLS verifying them against the
    deployment's CA and presenting globelog's client certificate, which bookies authorize;
    None when the deployment turned TLS off."""
    if not security.tls:
        return None
    return mutual_context(security.ca_cert, security.ledger_client_cert, security.ledger_client_key)
