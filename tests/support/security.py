"""The test deployment's identity: one signing key and admin token per test process, made once,
shared by every cluster the process starts (tests/support/topologies.py points each topology
at it). Clients find the admin token through GLOBELOG_TOKEN_FILE, as an operator's shell does;
raw HTTP in tests sends `auth_headers()`."""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from core.security.credentials import TOKEN_FILE_ENV, read_token_file
from core.security.credentials import auth_headers as _auth_headers
from core.security.files import init_security
from core.security.settings import SecuritySettings

WORKER = os.environ.get("PYTEST_XDIST_WORKER", "main")
SECURITY = SecuritySettings(
    Path(tempfile.gettempdir()) / f"globelog-test-security-{os.getuid()}-{WORKER}"
)


def set_up() -> None:
    init_security(SECURITY, time.time())
    os.environ[TOKEN_FILE_ENV] = str(SECURITY.admin_token)


def admin_token() -> str:
    return read_token_file(SECURITY.admin_token)


def auth_headers() -> dict[str, str]:
    return _auth_headers(admin_token())
