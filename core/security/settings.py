"""Where a deployment's keys, certificates and first token are, and what is demanded: topology.yaml's
`security:` section. It names files, never holds a secret.

    security:
      dir: .security      # made by `globelog security init`; relative to the topology file
      tokens: true        # every endpoint of every proxy demands a token (the default)

Without the section, tokens are demanded and the directory is `.security` beside the topology
file: the secure path is the default one. `tokens: false` is for a deployment that puts its
own gate in front of the proxies, and says so in every proxy's log at start.

The directory, as `globelog security init` lays it out:

    token-signing.key   Ed25519 private key (PEM): write proxies issue tokens with it
    token-signing.pub   its public key: every proxy verifies tokens with it
    admin.token         a token of every scope, for the operator (the CLI's default token)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

SECURITY_DIR_DEFAULT = ".security"
SIGNING_KEY_FILE = "token-signing.key"
PUBLIC_KEY_FILE = "token-signing.pub"
ADMIN_TOKEN_FILE = "admin.token"


@dataclass(frozen=True, slots=True)
class SecuritySettings:
    directory: Path = Path(SECURITY_DIR_DEFAULT)  # absolute once loaded from a file
    tokens: bool = True

    @property
    def signing_key(self) -> Path:
        return self.directory / SIGNING_KEY_FILE

    @property
    def public_key(self) -> Path:
        return self.directory / PUBLIC_KEY_FILE

    @property
    def admin_token(self) -> Path:
        return self.directory / ADMIN_TOKEN_FILE

    def beside(self, topology_file: Path) -> SecuritySettings:
        """These settings with a relative directory taken from beside `topology_file`."""
        if self.directory.is_absolute():
            return self
        return SecuritySettings((topology_file.parent / self.directory).resolve(), self.tokens)


class Problems(Protocol):
    def add(self, path: str, message: str) -> None: ...


def parse_security(node: Any, p: Problems) -> SecuritySettings | None:
    """The section in `node` (None or a mapping) over the defaults; problems to `p`."""
    if node is None:
        return SecuritySettings()
    if not isinstance(node, dict):
        p.add("security", f"expected a mapping of dir and tokens, got {type(node).__name__}")
        return None
    ok = True
    for key in sorted(set(node) - {"dir", "tokens"}):
        p.add(f"security.{key}", "unknown key; expected dir or tokens")
        ok = False
    directory = node.get("dir", SECURITY_DIR_DEFAULT)
    if not (isinstance(directory, str) and directory.strip()):
        p.add("security.dir", f"expected a directory path, got {directory!r}")
        ok = False
    tokens = node.get("tokens", True)
    if not isinstance(tokens, bool):
        p.add("security.tokens", f"expected true or false, got {tokens!r}")
        ok = False
    return SecuritySettings(Path(directory), tokens) if ok else None
