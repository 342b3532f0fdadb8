"""The deployment's shared secrets, beside its keys in `security.dir`:

    zookeeper.password   the ZooKeeper password of user `globelog` (SASL DIGEST-MD5); every
                         globelog and BookKeeper znode is readable and writable by that user only
    zookeeper.jaas       the same login for Java: a `Server` section for ZooKeeper's nodes and a
                         `Client` section for bookies and BookKeeper's tools
                         (-Djava.security.auth.login.config=<this file>)
    ledger.password      the password of every segment ledger: a bookie fences a ledger or adds
                         to it only for a client that knows it

Made once by `globelog security init` (random, 256 bits each) and kept; readable by their owner
only. A process that lacks one refuses to start and says which file and how to make it.
"""

from __future__ import annotations

import functools
import secrets
from dataclasses import dataclass
from pathlib import Path

from core.errors import ConfigError
from core.security.settings import SecuritySettings

ZK_USER = "globelog"
ZK_PASSWORD_FILE = "zookeeper.password"
ZK_JAAS_FILE = "zookeeper.jaas"
LEDGER_PASSWORD_FILE = "ledger.password"
SECRET_CHARS = 43  # secrets.token_urlsafe(32): 256 bits in URL-safe base64, no quotes to escape


@dataclass(frozen=True, slots=True)
class ZkTls:
    """TLS to ZooKeeper's port: its certificate verified against `ca`, the client's own
    certificate and key presented (ZooKeeper demands one of the deployment's CA)."""

    ca: Path
    cert: Path | None = None
    key: Path | None = None


@dataclass(frozen=True, slots=True)
class ZkLogin:
    """Who a process is to ZooKeeper: SASL DIGEST-MD5 user and password, over `tls`."""

    user: str
    password: str = ""
    tls: ZkTls | None = None

    def __repr__(self) -> str:  # never a password in a log line or a traceback
        return f"ZkLogin(user={self.user!r}, tls={self.tls})"


def zk_password_file(settings: SecuritySettings) -> Path:
    return settings.directory / ZK_PASSWORD_FILE


def zk_jaas_file(settings: SecuritySettings) -> Path:
    return settings.directory / ZK_JAAS_FILE


def ledger_password_file(settings: SecuritySettings) -> Path:
    return settings.directory / LEDGER_PASSWORD_FILE


def jaas_conf(login: ZkLogin) -> str:
    """JAAS login file for ZooKeeper's nodes (Server: the users it knows) and its Java clients
    (Client: who they are), both with ZooKeeper's DIGEST-MD5 login module."""
    module = "org.apache.zookeeper.server.auth.DigestLoginModule required"
    return (
        "// globelog: ZooKeeper's SASL login (made by `globelog security init`; secret)\n"
        f'Server {{\n  {module}\n  user_{login.user}="{login.password}";\n}};\n'
        f'Client {{\n  {module}\n  username="{login.user}"\n  password="{login.password}";\n}};\n'
    )


def _read_secret(path: Path, what: str) -> str:
    try:
        text = path.read_text(encoding="ascii", errors="replace")[: SECRET_CHARS * 4]
    except OSError as err:
        raise ConfigError(
            f"{what} {path}: {err.strerror}; make it with `globelog security init`"
        ) from None
    secret = text.strip()
    if len(secret) < 16 or not secret.isprintable() or '"' in secret:
        raise ConfigError(f"{what} {path}: expected one secret of 16 or more printable characters")
    return secret


@functools.lru_cache(maxsize=8)
def zk_login(settings: SecuritySettings) -> ZkLogin:
    """The deployment's ZooKeeper login, over TLS when the deployment has it (ConfigError
    when its file is missing or malformed)."""
    password = _read_secret(zk_password_file(settings), "ZooKeeper password file")
    return ZkLogin(ZK_USER, password, zk_tls(settings))


def zk_tls(settings: SecuritySettings) -> ZkTls | None:
    """How the deployment's clients reach ZooKeeper's port: TLS with globelog's client
    certificate, or None when the deployment has TLS off."""
    if not settings.tls:
        return None
    return ZkTls(settings.ca_cert, settings.ledger_client_cert, settings.ledger_client_key)


@functools.lru_cache(maxsize=8)
def ledger_password(settings: SecuritySettings) -> bytes:
    """The password of the deployment's segment ledgers."""
    return _read_secret(ledger_password_file(settings), "ledger password file").encode()


def init_secrets(settings: SecuritySettings) -> list[Path]:
    """Makes the secrets that are missing (an existing one is kept: ledgers and znodes already
    carry it); the JAAS file is rewritten when it no longer matches the password."""
    from core.security.pki import write_private

    written = []
    for path in (zk_password_file(settings), ledger_password_file(settings)):
        if not path.is_file():
            write_private(path, secrets.token_urlsafe(32).encode() + b"\n")
            written.append(path)
    jaas = jaas_conf(ZkLogin(ZK_USER, _read_secret(zk_password_file(settings), ZK_PASSWORD_FILE)))
    path = zk_jaas_file(settings)
    if not path.is_file() or path.read_text() != jaas:
        write_private(path, jaas.encode())
        written.append(path)
    return written
