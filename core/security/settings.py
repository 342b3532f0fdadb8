"""Where a deployment's keys, certificates and first token are, and what is demanded: topology.yaml's
`security:` section. It names files, never holds a secret.

    security:
      dir: .security      # made by `globelog security init`; relative to the topology file
      tokens: true        # every endpoint of every proxy demands a token (the default)
      tls: true           # the proxies serve HTTPS only, with certificates of the deployment's CA

Without the section, tokens and TLS are on and the directory is `.security` beside the topology
file: the secure path is the default one. `tokens: false` is for a deployment that puts its
own gate in front of the proxies, and says so in every proxy's log at start.

The directory, as `globelog security init` lays it out:

    token-signing.key   Ed25519 private key (PEM): write proxies issue tokens with it
    token-signing.pub   its public key: every proxy verifies tokens with it
    admin.token         a token of every scope, for the operator (the CLI's default token)
    ca.pem, ca.key      the deployment's certificate authority (core/security/pki.py)
    hosts/<host>.pem    each proxy, bookie and ZooKeeper host's certificate, .key its key, and
                        .bundle.pem both in one file (ZooKeeper's key store)
    clients/ledger-client.pem  the certificate globelog's processes present to bookies (role
                        `globelog`, which bookies authorize), and .key its key
    zookeeper.password, zookeeper.jaas, ledger.password  shared secrets (core/security/secrets.py)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

SECURITY_DIR_DEFAULT = ".security"
SIGNING_KEY_FILE = "token-signing.key"
PUBLIC_KEY_FILE = "token-signing.pub"
ADMIN_TOKEN_FILE = "admin.token"
CA_CERT_FILE = "ca.pem"
CA_KEY_FILE = "ca.key"
HOSTS_DIR = "hosts"
CLIENTS_DIR = "clients"
LEDGER_ROLE = "globelog"  # the role bookies authorize (BookKeeper's authorizedRoles)


@dataclass(frozen=True, slots=True)
class SecuritySettings:
    directory: Path = Path(SECURITY_DIR_DEFAULT)  # absolute once loaded from a file
    tokens: bool = True
    tls: bool = True

    @property
    def scheme(self) -> str:
        """The proxies' URL scheme."""
        return "https" if self.tls else "http"

    @property
    def ca_cert(self) -> Path:
        return self.directory / CA_CERT_FILE

    @property
    def ca_key(self) -> Path:
        return self.directory / CA_KEY_FILE

    def host_cert(self, host: str) -> Path:
        return self.directory / HOSTS_DIR / f"{host}.pem"

    def host_key(self, host: str) -> Path:
        return self.directory / HOSTS_DIR / f"{host}.key"

    def host_bundle(self, host: str) -> Path:
        """The host's key and certificate in one PEM file (ZooKeeper's key store)."""
        return self.directory / HOSTS_DIR / f"{host}.bundle.pem"

    @property
    def ledger_client_cert(self) -> Path:
        """The certificate every globelog process presents to bookies (role LEDGER_ROLE)."""
        return self.directory / CLIENTS_DIR / "ledger-client.pem"

    @property
    def ledger_client_key(self) -> Path:
        return self.directory / CLIENTS_DIR / "ledger-client.key"

    @property
    def ledger_client_bundle(self) -> Path:
        """Its key and certificate in one PEM file (the Java ZooKeeper client's key store)."""
        return self.directory / CLIENTS_DIR / "ledger-client.bundle.pem"

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
        directory = (topology_file.parent / self.directory).resolve()
        return SecuritySettings(directory, self.tokens, self.tls)


class Problems(Protocol):
    def add(self, path: str, message: str) -> None: ...


def parse_security(node: Any, p: Problems) -> SecuritySettings | None:
    """The section in `node` (None or a mapping) over the defaults; problems to `p`."""
    if node is None:
        return SecuritySettings()
    if not isinstance(node, dict):
        p.add("security", f"expected a mapping of dir, tokens, tls; got {type(node).__name__}")
        return None
    ok = True
    for key in sorted(set(node) - {"dir", "tokens", "tls"}):
        p.add(f"security.{key}", "unknown key; expected dir, tokens or tls")
        ok = False
    directory = node.get("dir", SECURITY_DIR_DEFAULT)
    if not (isinstance(directory, str) and directory.strip()):
        p.add("security.dir", f"expected a directory path, got {directory!r}")
        ok = False
    switches = {}
    for key in ("tokens", "tls"):
        switches[key] = node.get(key, True)
        if not isinstance(switches[key], bool):
            p.add(f"security.{key}", f"expected true or false, got {switches[key]!r}")
            ok = False
    return SecuritySettings(Path(directory), **switches) if ok else None
