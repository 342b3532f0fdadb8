"""A deployment's certificate authority and the certificates of its hosts (X.509, ECDSA P-256),
made by `globelog security init`, and the TLS contexts of servers and clients built on them.

    ca.pem, ca.key                 the deployment's CA (the key stays with the operator)
    hosts/<host>.pem, <host>.key   a host's certificate (its name or address as the SAN),
                                   for serving and for presenting to servers as a client

A server's context reloads its certificate when the files change (`ReloadingCertificate`), so
a renewed certificate is served without a restart.
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import os
import ssl
import tempfile
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from core.errors import ConfigError

CA_DAYS = 3650
HOST_DAYS = 730
RENEW_BEFORE_DAYS = 30  # `security init` renews a host certificate this close to its end


def write_private(path: Path, data: bytes, mode: int = 0o600) -> None:
    """Written whole or not at all (a temporary file of its own, then renamed), readable by
    its owner only unless `mode` says otherwise."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, partial = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.chmod(partial, mode)
        os.replace(partial, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(partial)
        raise


def write_public(path: Path, data: bytes) -> None:
    write_private(path, data, 0o644)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _name(common: str, role: str | None = None) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, "globelog")]
    if role is not None:  # BookKeeper's role authorization reads the role from OU "0:<role>"
        attributes.append(x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, f"0:{role}"))
    attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, common))
    return x509.Name(attributes)


def _sans(host: str) -> list[x509.GeneralName]:
    """The names a host's certificate answers to: its name or address, and for a loopback
    address also `localhost` (which Java clients may verify instead of the address)."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return [x509.DNSName(host)]
    names: list[x509.GeneralName] = [x509.IPAddress(address)]
    if address.is_loopback:
        names.append(x509.DNSName("localhost"))
    return names


@dataclass(frozen=True, slots=True)
class Authority:
    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate

    @classmethod
    def make(cls, deployment: str, now: datetime.datetime) -> Authority:
        key = ec.generate_private_key(ec.SECP256R1())
        name = _name(f"globelog CA of {deployment}")
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=CA_DAYS))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(key, hashes.SHA256())
        )
        return cls(key, cert)

    @classmethod
    def load(cls, cert_path: Path, key_path: Path) -> Authority:
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise ConfigError(f"{key_path}: expected the CA's EC private key")
        return cls(key, x509.load_pem_x509_certificate(cert_path.read_bytes()))

    def save(self, cert_path: Path, key_path: Path) -> None:
        write_private(key_path, _key_pem(self.key))
        write_public(cert_path, self.cert.public_bytes(serialization.Encoding.PEM))

    def issue(
        self, host: str, now: datetime.datetime, days: int = HOST_DAYS, role: str | None = None
    ) -> tuple[bytes, bytes]:
        """A certificate for `host` (PEM) and its key (PEM), for serving and as a client;
        with `role`, one bookies authorize as that role (a client's, whose `host` is a name)."""
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(host, role))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=days))
        )
        if role is None:
            builder = builder.add_extension(
                x509.SubjectAlternativeName(_sans(host)), critical=False
            )
        cert = (
            builder.add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.ExtendedKeyUsage(
                    [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
                ),
                critical=False,
            )
            .sign(self.key, hashes.SHA256())
        )
        return cert.public_bytes(serialization.Encoding.PEM), _key_pem(key)


def needs_renewal(cert_path: Path, now: datetime.datetime, host: str | None = None) -> bool:
    """Whether the certificate is missing, unreadable, near its end, or (for `host`) names
    other names than a new one would."""
    try:
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
    except (OSError, ValueError):
        return True
    if host is not None:
        try:
            names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        except x509.ExtensionNotFound:
            return True
        if list(names) != _sans(host):
            return True
    return cert.not_valid_after_utc - now < datetime.timedelta(days=RENEW_BEFORE_DAYS)


def write_host(cert_path: Path, key_path: Path, cert: bytes, key: bytes) -> None:
    write_private(key_path, key)
    write_public(cert_path, cert)


def server_context(cert_path: Path, key_path: Path) -> ssl.SSLContext:
    """TLS 1.2+ serving `cert_path`; ConfigError naming the file that cannot be used."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    load_chain(context, cert_path, key_path)
    return context


def load_chain(context: ssl.SSLContext, cert_path: Path, key_path: Path) -> None:
    try:
        context.load_cert_chain(cert_path, key_path)
    except (OSError, ssl.SSLError) as err:
        raise ConfigError(
            f"certificate {cert_path} with key {key_path}: {err}; `globelog security init` "
            "makes them"
        ) from None


def mutual_context(ca_path: Path, cert_path: Path, key_path: Path) -> ssl.SSLContext:
    """`client_context` that also presents a certificate of its own (bookies demand one)."""
    context = client_context(ca_path)
    load_chain(context, cert_path, key_path)
    return context


def client_context(ca_path: Path) -> ssl.SSLContext:
    """Verifies servers against the deployment's CA only (and their names)."""
    try:
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(ca_path))
    except (OSError, ssl.SSLError) as err:
        raise ConfigError(f"CA certificate {ca_path}: {err}") from None
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


class ReloadingCertificate:
    """A server context whose certificate is loaded again when its files change (`check()`,
    called every few seconds by the server): new connections get the new certificate."""

    def __init__(self, cert_path: Path, key_path: Path) -> None:
        self.cert_path = cert_path
        self.key_path = key_path
        self.context = server_context(cert_path, key_path)
        self._seen = self._stamp()
        self.reloads = 0

    def _stamp(self) -> tuple[float, float]:
        try:
            return self.cert_path.stat().st_mtime, self.key_path.stat().st_mtime
        except OSError:
            return (0.0, 0.0)

    def check(self) -> bool:
        """Reloads if the files changed since the last load; True when it did. A pair that
        cannot be loaded (half written) is tried again at the next check."""
        stamp = self._stamp()
        if stamp == self._seen:
            return False
        load_chain(self.context, self.cert_path, self.key_path)
        self._seen = stamp
        self.reloads += 1
        return True
