"""Access tokens: who a request comes from, what it may do, and until when.

A token is a JWT signed with the deployment's Ed25519 key (EdDSA). Its claims:

    sub    the subject: who holds it ("alice", "service/billing")
    jti    the token's id, which `globelog token revoke` names
    iat    issued at, exp  expires at (seconds since the epoch)
    scope  {"namespaces": [...], "streams": [...], "ops": [...]}
    chain  the ids of the tokens that issued it, the first issuer's first (absent: none, as
           for tokens made with the signing key itself); revoking a token revokes every
           token it issued, and theirs, down the chain

A namespace or stream pattern is a name (`orders`, exactly that one) or a prefix ending in `*`
(`team-a.*` is every name starting `team-a.`; `*` is every name). A request needs one
operation on one resource: a stream (namespace and stream), a namespace, or the proxy itself.

    read      list a namespace, describe and read streams
    append    write records, start a write session (fence), heartbeat
    create    create streams
    delete    delete streams
    truncate  truncate streams and set their retention
    admin     release a stream's ownership; issue, list and revoke tokens within the scope
    observe   /v1/health, /metrics, /debug/traces

A token issues only tokens whose scope lies within its own and that expire no later than it,
at most CHAIN_MAX issuers deep.
Pure: nothing here reads a file or a clock of its own.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from core.errors import BadRequestError, ConfigError, ForbiddenError, UnauthenticatedError
from core.streams import NAME_CHARS_MAX

OPS = ("read", "append", "create", "delete", "truncate", "admin", "observe")
ALGORITHM = "EdDSA"
TOKEN_CHARS_MAX = 8192  # a header longer than this is not a token of ours
SUBJECT_CHARS_MAX = 128
PATTERNS_MAX = 64  # per list of a scope
LEEWAY_S = 5.0  # clocks of the issuer and the proxies may differ by this much
CHAIN_MAX = 8  # issuers above a token at most: a token this deep issues no more
_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*\*?|\*")
_SUBJECT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@/:-]*")
_TOKEN_ID = re.compile(r"[0-9a-f]{32}")


@dataclass(frozen=True, slots=True)
class Names:
    """A set of names: exact ones and prefixes (a pattern's part before its `*`)."""

    exact: frozenset[str]
    prefixes: frozenset[str]

    @classmethod
    def parse(cls, patterns: Iterable[str], what: str) -> Names:
        exact: set[str] = set()
        prefixes: set[str] = set()
        listed = list(patterns)
        if len(listed) > PATTERNS_MAX:
            raise BadRequestError(
                f"{what}: {len(listed)} patterns; expected at most {PATTERNS_MAX}"
            )
        for pattern in listed:
            if not (
                isinstance(pattern, str)
                and len(pattern) <= NAME_CHARS_MAX + 1
                and _PATTERN.fullmatch(pattern)
            ):
                raise BadRequestError(
                    f"{what}: pattern {pattern!r} is invalid; expected a name of letters, digits, "
                    "'.', '_', '-' (exactly that name), the same ending in '*' (every name "
                    "starting so) or '*' (every name)"
                )
            if pattern.endswith("*"):
                prefixes.add(pattern[:-1])
            else:
                exact.add(pattern)
        return cls(frozenset(exact), frozenset(prefixes))

    def matches(self, name: str) -> bool:
        return name in self.exact or any(name.startswith(p) for p in self.prefixes)

    def within(self, other: Names) -> bool:
        """Every name of this set is a name of `other`."""
        return all(other.matches(name) for name in self.exact) and all(
            any(prefix.startswith(theirs) for theirs in other.prefixes) for prefix in self.prefixes
        )

    def patterns(self) -> list[str]:
        return sorted(self.exact) + sorted(p + "*" for p in self.prefixes)


@dataclass(frozen=True, slots=True)
class Scope:
    namespaces: Names
    streams: Names
    ops: frozenset[str]

    @classmethod
    def parse(cls, raw: Any) -> Scope:
        """A scope from its claim (or an issue request): every problem named."""
        if not isinstance(raw, Mapping):
            raise BadRequestError(f"scope {raw!r}: expected an object of namespaces, streams, ops")
        unknown = sorted(set(raw) - {"namespaces", "streams", "ops"})
        if unknown:
            raise BadRequestError(
                f"scope: unknown key(s) {unknown}; expected namespaces, streams, ops"
            )
        lists = {}
        for key in ("namespaces", "streams", "ops"):
            value = raw.get(key, [])
            if not isinstance(value, list):
                raise BadRequestError(f"scope.{key} = {value!r}: expected a list of strings")
            lists[key] = value
        bad_ops = [op for op in lists["ops"] if op not in OPS]
        if bad_ops:
            raise BadRequestError(f"scope.ops: {bad_ops!r} unknown; expected some of {list(OPS)}")
        return cls(
            Names.parse(lists["namespaces"], "scope.namespaces"),
            Names.parse(lists["streams"], "scope.streams"),
            frozenset(lists["ops"]),
        )

    @classmethod
    def everything(cls) -> Scope:
        every = Names(frozenset(), frozenset({""}))
        return cls(every, every, frozenset(OPS))

    def claim(self) -> dict[str, list[str]]:
        return {
            "namespaces": self.namespaces.patterns(),
            "streams": self.streams.patterns(),
            "ops": [op for op in OPS if op in self.ops],
        }

    def allows(self, op: str, namespace: str | None = None, stream: str | None = None) -> bool:
        if op not in self.ops:
            return False
        if namespace is not None and not self.namespaces.matches(namespace):
            return False
        return stream is None or self.streams.matches(stream)

    def within(self, other: Scope) -> bool:
        return (
            self.ops <= other.ops
            and self.namespaces.within(other.namespaces)
            and self.streams.within(other.streams)
        )


@dataclass(frozen=True, slots=True)
class Token:
    """A verified token's claims."""

    subject: str
    token_id: str
    issued_at: float
    expires_at: float
    scope: Scope
    chain: tuple[str, ...] = ()  # the ids of the tokens that issued it, the first's first

    def revoked_by(self, revoked: frozenset[str]) -> str | None:
        """Which revoked token ends this one: itself or an issuer up its chain; None if none."""
        if self.token_id in revoked:
            return self.token_id
        return next((issuer for issuer in self.chain if issuer in revoked), None)

    def require(self, op: str, namespace: str | None = None, stream: str | None = None) -> None:
        """Raise ForbiddenError naming what this token lacks for `op` on the resource."""
        if self.scope.allows(op, namespace, stream):
            return
        resource = "this proxy" if namespace is None else f"namespace {namespace!r}"
        if stream is not None:
            resource = f"stream {namespace}/{stream}"
        raise ForbiddenError(
            f"token {self.token_id} of {self.subject!r} may not {op} {resource}; its scope is "
            f"{self.scope.claim()}"
        )


def new_signing_key() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.generate()


def signing_key_pem(key: Ed25519PrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def public_key_pem(key: Ed25519PrivateKey) -> bytes:
    return key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def load_signing_key(pem: bytes, source: str) -> Ed25519PrivateKey:
    try:
        key = serialization.load_pem_private_key(pem, password=None)
    except (ValueError, TypeError) as err:
        raise ConfigError(f"{source}: not an unencrypted PEM private key ({err})") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise ConfigError(f"{source}: expected an Ed25519 private key, got {type(key).__name__}")
    return key


def load_public_key(pem: bytes, source: str) -> Ed25519PublicKey:
    try:
        key = serialization.load_pem_public_key(pem)
    except (ValueError, TypeError) as err:
        raise ConfigError(f"{source}: not a PEM public key ({err})") from None
    if not isinstance(key, Ed25519PublicKey):
        raise ConfigError(f"{source}: expected an Ed25519 public key, got {type(key).__name__}")
    return key


def check_token_id(token_id: str) -> str:
    """A token id as tokens are issued with (32 hex digits); BadRequestError otherwise."""
    if not _TOKEN_ID.fullmatch(token_id):
        raise BadRequestError(f"token id {token_id[:80]!r} is invalid; expected 32 hex digits")
    return token_id


def check_subject(subject: str) -> str:
    if not (len(subject) <= SUBJECT_CHARS_MAX and _SUBJECT.fullmatch(subject)):
        raise BadRequestError(
            f"subject {subject!r} is invalid; expected 1..{SUBJECT_CHARS_MAX} characters of "
            "letters, digits and . _ @ / : - (starting with a letter or digit)"
        )
    return subject


def issue(
    key: Ed25519PrivateKey,
    subject: str,
    scope: Scope,
    now: float,
    ttl_s: float,
    token_id: str | None = None,
    chain: tuple[str, ...] = (),
) -> tuple[str, Token]:
    """A signed token and its claims. `ttl_s` > 0."""
    if not ttl_s > 0:
        raise BadRequestError(f"ttl {ttl_s!r} s: expected > 0")
    claims = Token(
        check_subject(subject), token_id or uuid.uuid4().hex, now, now + ttl_s, scope, chain
    )
    payload: dict[str, Any] = {
        "sub": claims.subject,
        "jti": claims.token_id,
        "iat": int(claims.issued_at),
        "exp": int(claims.expires_at),
        "scope": scope.claim(),
    }
    if chain:
        payload["chain"] = list(chain)
    return jwt.encode(payload, key, algorithm=ALGORITHM), claims


def issue_within(
    caller: Token,
    key: Ed25519PrivateKey,
    subject: str,
    scope: Scope,
    now: float,
    ttl_s: float,
) -> tuple[str, Token]:
    """A token issued on behalf of `caller`: admin in its scope, the new scope within it,
    expiring no later than it, and fewer than CHAIN_MAX issuers above it. ForbiddenError names
    which of these fails."""
    caller.require("admin")
    if len(caller.chain) >= CHAIN_MAX:
        raise ForbiddenError(
            f"token {caller.token_id} of {caller.subject!r} has {len(caller.chain)} issuers "
            f"above it; tokens issue others at most {CHAIN_MAX} deep"
        )
    if not scope.within(caller.scope):
        raise ForbiddenError(
            f"token {caller.token_id} of {caller.subject!r} may issue only within its scope "
            f"{caller.scope.claim()}; asked for {scope.claim()}"
        )
    ttl_s = min(ttl_s, caller.expires_at - now)
    if not ttl_s > 0:
        raise ForbiddenError(f"token {caller.token_id} of {caller.subject!r} has expired")
    return issue(key, subject, scope, now, ttl_s, chain=(*caller.chain, caller.token_id))


def verify(token: str, key: Ed25519PublicKey, now: float) -> Token:
    """The claims of `token` if it is ours and current; UnauthenticatedError saying why not.
    (Revocation is the caller's to check: it knows the revocation list.)"""
    if len(token) > TOKEN_CHARS_MAX:
        raise UnauthenticatedError(
            f"token of {len(token)} characters; expected a signed token of at most {TOKEN_CHARS_MAX}"
        )
    try:
        payload = jwt.decode(
            token,
            key,
            algorithms=[ALGORITHM],
            options={
                "require": ["sub", "jti", "iat", "exp"],
                # times are checked below against the caller's clock
                "verify_exp": False,
                "verify_iat": False,
                "verify_nbf": False,
            },
        )
    except jwt.InvalidSignatureError:
        raise UnauthenticatedError(
            "token signature invalid: not signed by this deployment's key"
        ) from None
    except jwt.PyJWTError as e:
        raise UnauthenticatedError(f"token malformed: {e}") from None
    try:
        scope = Scope.parse(payload.get("scope"))
        claims = Token(
            check_subject(str(payload["sub"])),
            str(payload["jti"]),
            float(payload["iat"]),
            float(payload["exp"]),
            scope,
            _chain(payload.get("chain", [])),
        )
    except (BadRequestError, TypeError, ValueError) as e:
        raise UnauthenticatedError(f"token claims invalid: {e}") from None
    if claims.issued_at > now + LEEWAY_S:
        raise UnauthenticatedError(
            f"token {claims.token_id} of {claims.subject!r} issued "
            f"{claims.issued_at - now:.0f} s in the future: is a clock wrong?"
        )
    if now > claims.expires_at + LEEWAY_S:
        raise UnauthenticatedError(
            f"token {claims.token_id} of {claims.subject!r} expired {now - claims.expires_at:.0f} s ago"
        )
    return claims


def _chain(raw: Any) -> tuple[str, ...]:
    if not (
        isinstance(raw, list) and len(raw) <= CHAIN_MAX and all(isinstance(i, str) for i in raw)
    ):
        raise ValueError(f"chain {raw!r:.80}: expected a list of at most {CHAIN_MAX} token ids")
    return tuple(check_token_id(issuer) for issuer in raw)


def bearer(header: str | None) -> str:
    """The token of an `Authorization: Bearer <token>` header; UnauthenticatedError if none."""
    if header is None:
        raise UnauthenticatedError(
            "no token: expected an 'Authorization: Bearer <token>' header (globelog token issue)"
        )
    scheme, _, value = header.strip().partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        shown = header[:20] + ("..." if len(header) > 20 else "")
        raise UnauthenticatedError(f"Authorization header {shown!r}: expected 'Bearer <token>'")
    return value.strip()
