"""A proxy's security: its token gate, the revocation list it follows, and (on write proxies)
the token service.

    POST   /v1/tokens          {"subject", "scope", "ttl_s"}: a token within the caller's scope
    GET    /v1/tokens          the unexpired tokens on record within the caller's scope
    DELETE /v1/tokens/{id}     revokes a token within the caller's scope

All three need `admin`. A token is shown once, when issued; the record keeps its claims only.
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Middleware
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from core.errors import (
    BadRequestError,
    ConfigError,
    ForbiddenError,
    NotFoundError,
    RequestTooLargeError,
)
from core.security import pki
from core.security.settings import SecuritySettings
from core.security.tokens import (
    Scope,
    Token,
    check_token_id,
    issue_within,
    load_public_key,
    load_signing_key,
)
from core.settings.limits import ProxyLimits
from global_meta import MetaStore
from global_meta import tokens as records
from global_meta.followers import Follower, FollowerStatus
from region.admission.listener import bounded_body
from region.http_errors import json_response
from region.security.gate import TOKEN, Gate, Rule, Rules

log = logging.getLogger(__name__)
TOKEN_ROUTES: Rules = {
    ("POST", "/v1/tokens"): Rule("admin", "proxy"),
    ("GET", "/v1/tokens"): Rule("admin", "proxy"),
    ("DELETE", "/v1/tokens/{token_id}"): Rule("admin", "proxy"),
}
ISSUE_BODY_BYTES_MAX = 16 * 1024
CERTIFICATE_CHECK_S = 5.0  # how often a proxy looks for a renewed certificate
TTL_S_MAX = 366 * 24 * 3600.0


def _read(path: Any, what: str) -> bytes:
    try:
        return bytes(path.read_bytes())
    except OSError as err:
        raise ConfigError(
            f"{what} {path}: {err.strerror}; `globelog security init` makes it"
        ) from None


@dataclass
class ProxySecurity:
    """What a proxy needs to check tokens (a `gate`; with `signing_key`, to issue them) and to
    serve TLS (`certificate`, reloaded when its files change). Either may be off."""

    gate: Gate | None
    revocations: records.RevocationWatch | None
    signing_key: Ed25519PrivateKey | None
    certificate: pki.ReloadingCertificate | None
    store: MetaStore
    limits: ProxyLimits
    clock: Callable[[], float] = time.time

    def __post_init__(self) -> None:
        self._reloader = Follower("certificate reloads", self._reload_certificates)
        self._pruned_at = float("-inf")

    @classmethod
    def load(
        cls,
        settings: SecuritySettings,
        store: MetaStore,
        limits: ProxyLimits,
        issues: bool,
        host: str,
        on_failed: Callable[[FollowerStatus], None] | None = None,
    ) -> ProxySecurity:
        """A proxy's security on `host` as `settings` ask; ConfigError naming a missing file.
        What is off is logged as a warning."""
        gate, revocations, signing, certificate = None, None, None, None
        if settings.tokens:
            pem = _read(settings.public_key, "token public key")
            public = load_public_key(pem, str(settings.public_key))
            if issues:
                pem = _read(settings.signing_key, "token signing key")
                signing = load_signing_key(pem, str(settings.signing_key))
            watch = records.RevocationWatch(store, on_failed=on_failed)
            gate, revocations = Gate(public, lambda: watch.revoked), watch
        else:
            log.warning("security.tokens is false: this proxy serves anyone who reaches its port")
        if settings.tls:
            certificate = pki.ReloadingCertificate(
                settings.host_cert(host), settings.host_key(host)
            )
        else:
            log.warning("security.tls is false: this proxy serves HTTP in clear text")
        return cls(gate, revocations, signing, certificate, store, limits)

    @property
    def ssl(self) -> ssl.SSLContext | None:
        return None if self.certificate is None else self.certificate.context

    async def start(self) -> None:
        if self.revocations is not None:
            await self.revocations.start()
        if self.certificate is not None:
            self._reloader.start()

    async def stop(self) -> None:
        if self.revocations is not None:
            await self.revocations.stop()
        await self._reloader.stop()

    def followers(self) -> list[FollowerStatus]:
        """Health's view: the revocation watch and the certificate reloads, when on."""
        found = [] if self.revocations is None else [self.revocations.status()]
        return found + ([self._reloader.status()] if self.certificate is not None else [])

    async def _prune_when_due(self, now: float) -> None:
        """Removes expired tokens' records, at most every PRUNE_EVERY_S from this proxy."""
        if now - self._pruned_at >= records.PRUNE_EVERY_S:
            self._pruned_at = now
            await records.prune_expired(self.store, now)

    async def _reload_certificates(self, following: Callable[[], None]) -> None:
        """Serves a renewed certificate without a restart: new connections get it."""
        assert self.certificate is not None
        following()
        while True:
            await asyncio.sleep(CERTIFICATE_CHECK_S)
            if self.certificate.check():
                log.info("certificate %s reloaded", self.certificate.cert_path)

    def middlewares(self, rules: Rules) -> list[Middleware]:
        """The gate's middleware, when tokens are on."""
        return [] if self.gate is None else [self.gate.middleware(rules)]

    def add_token_routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/tokens", self._issue)
        app.router.add_get("/v1/tokens", self._list)
        app.router.add_delete("/v1/tokens/{token_id}", self._revoke)

    async def _issue(self, request: web.Request) -> web.Response:
        caller = request[TOKEN]
        if self.signing_key is None:
            raise BadRequestError("this proxy does not issue tokens: ask a write proxy")
        raw = await bounded_body(
            request, self.limits, ISSUE_BODY_BYTES_MAX, RequestTooLargeError, "a token request"
        )
        body = _json_object(raw)
        subject, ttl_s = body.get("subject"), body.get("ttl_s", 24 * 3600.0)
        if not isinstance(subject, str):
            raise BadRequestError(f"subject {subject!r:.80}: expected a string")
        if not (type(ttl_s) in (int, float) and 0 < ttl_s <= TTL_S_MAX):
            raise BadRequestError(f"ttl_s {ttl_s!r:.40}: expected seconds in (0, {TTL_S_MAX:.0f}]")
        now = self.clock()
        scope = Scope.parse(body.get("scope"))
        token, claims = issue_within(caller, self.signing_key, subject, scope, now, ttl_s)
        await self._prune_when_due(now)
        await records.record_issued(self.store, claims, caller.subject, caller.token_id, now)
        log.info(
            "token %s issued to %r by %r (%s), scope %s, expires in %.0f s",
            claims.token_id,
            claims.subject,
            caller.subject,
            caller.token_id,
            scope.claim(),
            claims.expires_at - now,
        )
        return json_response(
            {
                "token": token,
                "id": claims.token_id,
                "sub": claims.subject,
                "scope": scope.claim(),
                "exp": claims.expires_at,
            },
            status=201,
        )

    async def _list(self, request: web.Request) -> web.Response:
        caller = request[TOKEN]
        now = self.clock()
        await self._prune_when_due(now)
        visible = await records.issued_tokens(self.store, now, lambda t: _within(t, caller))
        return json_response({"tokens": [t.as_json() for t in visible]})

    async def _revoke(self, request: web.Request) -> web.Response:
        caller = request[TOKEN]
        token_id = check_token_id(request.match_info["token_id"])
        found = await records.issued_token(self.store, token_id, self.clock())
        if found is None:
            raise NotFoundError(f"no unexpired token {token_id!r} is on record")
        if not _within(found, caller) and token_id != caller.token_id:
            raise ForbiddenError(
                f"token {caller.token_id} of {caller.subject!r} may revoke only tokens within "
                f"its scope {caller.scope.claim()}; {token_id} has {found.scope}"
            )
        revoked = await records.revoke(self.store, found, caller.subject, self.clock())
        log.info("token %s of %r revoked by %r", token_id, found.subject, caller.subject)
        return json_response({"id": token_id, "revoked": True, "already": not revoked})


def _within(record: records.IssuedToken, caller: Token) -> bool:
    try:
        return Scope.parse(record.scope).within(caller.scope)
    except BadRequestError:  # a malformed record: not the caller's to see
        return False


def _json_object(raw: bytes) -> dict[str, Any]:
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as err:
        raise BadRequestError(f"body is not JSON ({err}); expected an object") from None
    if not isinstance(body, dict):
        raise BadRequestError(f"body {body!r:.80}: expected a JSON object")
    return body
