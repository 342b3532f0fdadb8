"""The token a client sends, and where it comes from when the caller names none:

    GLOBELOG_TOKEN        the token itself
    GLOBELOG_TOKEN_FILE   a file holding it
    the deployment's admin token (`security.dir`/admin.token), on a host that holds it

Clients (`ProxyClient`, `ReadClient`, the CLI, the Spark source and sink, the local cluster's
probes) send it as `Authorization: Bearer <token>`.
"""

from __future__ import annotations

import os
from pathlib import Path

from core.errors import ConfigError
from core.security.settings import SecuritySettings
from core.security.tokens import TOKEN_CHARS_MAX

TOKEN_ENV = "GLOBELOG_TOKEN"
TOKEN_FILE_ENV = "GLOBELOG_TOKEN_FILE"


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
    token = os.environ.get(TOKEN_ENV, "").strip()
    if token:
        return token
    named = os.environ.get(TOKEN_FILE_ENV, "").strip()
    if named:
        return read_token_file(Path(named), TOKEN_FILE_ENV)
    if security is not None and security.tokens and security.admin_token.is_file():
        return read_token_file(security.admin_token, "admin token")
    return None


def auth_headers(token: str | None) -> dict[str, str]:
    return {} if token is None else {"Authorization": f"Bearer {token}"}


def adopt_admin_token(security: SecuritySettings) -> None:
    """Makes the deployment's admin token this process's default (and its children's), unless
    the environment names a token already or this host holds none: the composition root's
    choice (`globelog`, the demo), never a library's."""
    if os.environ.get(TOKEN_ENV, "").strip() or os.environ.get(TOKEN_FILE_ENV, "").strip():
        return
    if security.tokens and security.admin_token.is_file():
        os.environ[TOKEN_FILE_ENV] = str(security.admin_token)
