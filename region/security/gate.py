"""Who may do what on a proxy: every route has a rule, every request's token is checked by it.

A rule names the operation a route needs and what it is done on (the proxy itself, the path's
namespace, or the path's stream). `require_rules(app, rules)` refuses to build a proxy with a
route that has no rule, so an endpoint cannot be added without deciding who may call it.
With tokens on, the middleware answers a request without a valid token 401 `unauthenticated`
and one whose token's scope lacks the rule 403 `forbidden`, before any handler runs; the
handler finds the verified token at `request[TOKEN]`.

Verifying an EdDSA signature costs tens of microseconds; verified tokens are kept (bounded,
`VERIFIED_MAX`) and only their expiry and the revocation list are checked again.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Literal

from aiohttp import web
from aiohttp.typedefs import Middleware
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from core.errors import ConfigError, ForbiddenError, UnauthenticatedError
from core.security.tokens import LEEWAY_S, OPS, Token, bearer, verify

Resource = Literal["proxy", "namespace", "stream"]
TOKEN = web.RequestKey("token", Token)
VERIFIED_MAX = 4096  # verified tokens kept, least recently used dropped first


@dataclass(frozen=True, slots=True)
class Rule:
    op: str
    on: Resource

    def __post_init__(self) -> None:
        if self.op not in OPS:
            raise ConfigError(f"rule op {self.op!r}: expected one of {list(OPS)}")


# rules keyed by (method, path as registered); HEAD follows GET's rule
Rules = Mapping[tuple[str, str], Rule]
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def rule_key(method: str, path: str) -> tuple[str, str]:
    return ("GET" if method == "HEAD" else method, path)


def require_rules(app: web.Application, rules: Rules) -> None:
    """ConfigError naming every route of `app` without a rule, every rule without a route, and
    every rule on a namespace or stream whose path does not name it."""
    routed = {rule_key(r.method, r.resource.canonical) for r in app.router.routes() if r.resource}
    missing = sorted(routed - set(rules))
    unused = sorted(set(rules) - routed)
    unnamed = sorted(
        (method, path)
        for (method, path), rule in rules.items()
        if ("{ns}" not in path and rule.on != "proxy")
        or ("{stream}" not in path and rule.on == "stream")
    )
    if missing or unused or unnamed:
        raise ConfigError(
            f"access rules: routes without a rule {missing}; rules without a route {unused}; "
            f"rules on a namespace or stream their path does not name {unnamed}"
        )


class Gate:
    """Checks bearer tokens against a deployment's public key and its revocation list."""

    def __init__(
        self,
        public_key: Ed25519PublicKey,
        revoked: Callable[[], frozenset[str]],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._key = public_key
        self._revoked = revoked
        self._clock = clock
        self._verified: OrderedDict[str, Token] = OrderedDict()

    def still_valid(self, token: Token) -> None:
        """UnauthenticatedError once `token` expired or was revoked (for requests that last:
        a streamed tail checks it as it goes)."""
        now = self._clock()
        if now > token.expires_at + LEEWAY_S:
            raise UnauthenticatedError(
                f"token {token.token_id} of {token.subject!r} expired "
                f"{now - token.expires_at:.0f} s ago"
            )
        revoked = token.revoked_by(self._revoked())
        if revoked == token.token_id:
            raise UnauthenticatedError(f"token {token.token_id} of {token.subject!r} is revoked")
        if revoked is not None:
            raise UnauthenticatedError(
                f"token {token.token_id} of {token.subject!r} is revoked: token {revoked}, "
                "which issued it or one of its issuers, was revoked"
            )

    def authenticate(self, header: str | None) -> Token:
        raw = bearer(header)
        now = self._clock()
        token = self._verified.get(raw)
        if token is None:
            token = verify(raw, self._key, now)
            self._verified[raw] = token
            if len(self._verified) > VERIFIED_MAX:
                self._verified.popitem(last=False)
        else:
            self._verified.move_to_end(raw)
        self.still_valid(token)
        return token

    def middleware(self, rules: Rules) -> Middleware:
        @web.middleware
        async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
            resource = request.match_info.route.resource
            if resource is None:  # aiohttp's own answers (404, 405): nothing of ours runs
                return await handler(request)
            rule = rules.get(rule_key(request.method, resource.canonical))
            if rule is None:  # a route added past require_rules: closed, never open
                raise ForbiddenError(f"{request.method} {resource.canonical} has no access rule")
            token = self.authenticate(request.headers.get("Authorization"))
            namespace = request.match_info.get("ns") if rule.on != "proxy" else None
            stream = request.match_info.get("stream") if rule.on == "stream" else None
            token.require(rule.op, namespace, stream)
            request[TOKEN] = token
            return await handler(request)

        return check
