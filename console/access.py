"""Who may see and do what in the console: a globelog token, given once at sign-in and kept in
a cookie, checked on every request by the same gate as the proxies' (signature, expiry,
revocation list), against a rule per route.

Pages without a valid token send the browser to /signin; API calls get the proxies' 401
`unauthenticated` or 403 `forbidden` as JSON. Reads and changes of streams go on to the
proxies with the same token, so the proxies check it again. Changes need `admin` here on top
of the proxies' own operation, and a header only the console's own script sends
(`X-Globelog-Console`: a form on another site cannot set it; the cookie is SameSite=Strict
too). Every change is written to the audit log, refused or not.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Middleware

from core.errors import ConfigError, ForbiddenError, GlobelogError, UnauthenticatedError
from core.security.tokens import OPS, Scope, Token, bearer
from core.streams import check_name
from region.security.gate import Gate, rule_key

log = logging.getLogger(__name__)

COOKIE = "globelog_console"
CHANGE_HEADER = "X-Globelog-Console"
TOKEN_KEY = web.RequestKey("console_token", Token)
RAW_TOKEN_KEY = web.RequestKey("console_raw_token", str)  # as verified: what the proxies get
SAME_SITE_FETCHES = ("same-origin", "none")  # Sec-Fetch-Site values a sign-in may come with
AUDIT_BYTES_MAX = 16 * 1024 * 1024  # the audit log is rotated (one old file kept) past this
AUDIT_SHOWN_MAX = 200  # entries the audit page shows, newest first
SIGNIN_TOKEN_BYTES_MAX = 8 * 1024

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
# Without tokens (security.tokens false) every request acts with this scope, as on the proxies.
OPEN = Token("anyone", "-", 0.0, float("inf"), Scope.everything())


@dataclass(frozen=True, slots=True)
class Need:
    """What a route needs: `op` on the proxy, the path's namespace or its stream; `change`
    marks a route that changes something (admin, the console's header, the audit log)."""

    op: str
    # "proxy": the op, whatever the token's names; "cluster": the op with every namespace
    # and stream in scope (a change to the whole deployment: a bookie's decommission, the
    # audit log of everyone's changes); "namespace" / "stream": the path's
    on: str = "proxy"
    change: bool = False

    def __post_init__(self) -> None:
        if self.op not in OPS:
            raise ConfigError(f"console rule op {self.op!r}: expected one of {list(OPS)}")


PUBLIC = None  # a route anyone may reach (sign-in, static files)
Rules = Mapping[tuple[str, str], Need | None]


def check_rules(app: web.Application, rules: Rules) -> None:
    """ConfigError naming each route without a rule and each rule without a route."""
    routed = {rule_key(r.method, r.resource.canonical) for r in app.router.routes() if r.resource}
    missing, unused = sorted(routed - set(rules)), sorted(set(rules) - routed)
    if missing or unused:
        raise ConfigError(f"console rules: routes without a rule {missing}; unused {unused}")


NAMED = ("namespace", "stream")


def covers_everything(scope: Scope) -> bool:
    """Whether the scope names every namespace and every stream (patterns `*`)."""
    return "" in scope.namespaces.prefixes and "" in scope.streams.prefixes


def require(token: Token, op: str, on: str, namespace: str | None, stream: str | None) -> None:
    """ForbiddenError unless `token` may do `op` as a rule `on` asks."""
    token.require(op, namespace, stream)
    if on == "cluster" and not covers_everything(token.scope):
        raise ForbiddenError(
            f"token {token.token_id} of {token.subject!r} may {op} only some namespaces or "
            f"streams ({token.scope.claim()}); this acts on the whole deployment and needs "
            "every one (namespaces and streams `*`)"
        )


def same_site(request: web.Request) -> None:
    """ForbiddenError for a sign-in or sign-out another site's page sent (login CSRF): the
    browser names where a request comes from (Sec-Fetch-Site, Origin)."""
    fetch = request.headers.get("Sec-Fetch-Site")
    origin = request.headers.get("Origin")
    if fetch is not None and fetch not in SAME_SITE_FETCHES:
        raise ForbiddenError(f"a sign-in from another site ({fetch}) is refused")
    if origin is not None and origin != "null":
        expected = f"{request.scheme}://{request.host}"
        if origin != expected:
            raise ForbiddenError(f"a sign-in from {origin!r:.100} is refused; expected {expected}")


def is_api(request: web.Request) -> bool:
    return request.path.startswith("/api/")


class ConsoleAccess:
    """The gate (None when the deployment has tokens off) and the audit log."""

    def __init__(self, gate: Gate | None, audit_path: Path, secure_cookie: bool) -> None:
        self.gate = gate
        self.audit = AuditLog(audit_path)
        self._secure = secure_cookie

    def token_of(self, request: web.Request) -> Token:
        """The request's verified token: its Authorization header, else the sign-in cookie.
        The raw token verified is kept at request[RAW_TOKEN_KEY], so the proxies are sent
        exactly the token checked here."""
        if self.gate is None:
            return OPEN
        header = request.headers.get("Authorization")
        if header is None:
            cookie = request.cookies.get(COOKIE)
            header = None if cookie is None else f"Bearer {cookie}"
        token = self.gate.authenticate(header)
        request[RAW_TOKEN_KEY] = bearer(header)
        return token

    def sign_in(self, raw: str) -> tuple[Token, web.HTTPSeeOther]:
        """Checks `raw` and answers with the cookie that keeps it; UnauthenticatedError if the
        gate refuses it."""
        raw = raw.strip()
        if len(raw) > SIGNIN_TOKEN_BYTES_MAX:
            raise UnauthenticatedError(
                f"a token of {len(raw)} bytes; tokens are at most {SIGNIN_TOKEN_BYTES_MAX}"
            )
        token = OPEN if self.gate is None else self.gate.authenticate(f"Bearer {raw}")
        answer = web.HTTPSeeOther("/")
        answer.set_cookie(
            COOKIE, raw, httponly=True, secure=self._secure, samesite="Strict", path="/",
            max_age=max(60, int(min(token.expires_at - time.time(), 7 * 24 * 3600))),
        )  # fmt: skip
        return token, answer

    def middleware(self, rules: Rules) -> Middleware:
        @web.middleware
        async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
            resource = request.match_info.route.resource
            if resource is None:  # aiohttp's own 404 and 405
                return await handler(request)
            key = rule_key(request.method, resource.canonical)
            if key not in rules:
                raise ForbiddenError(f"{request.method} {resource.canonical} has no access rule")
            need = rules[key]
            if need is None:
                return await handler(request)
            try:
                token = self.token_of(request)
            except UnauthenticatedError:
                if is_api(request) or request.method != "GET":
                    raise
                raise web.HTTPSeeOther("/signin") from None
            namespace = request.match_info.get("ns") if need.on in NAMED else None
            stream = request.match_info.get("stream") if need.on == "stream" else None
            # a name the proxies would refuse is refused here too, before it reaches a path
            if "ns" in request.match_info:
                check_name(request.match_info["ns"], "namespace")
            if "stream" in request.match_info:
                check_name(request.match_info["stream"])
            request[TOKEN_KEY] = token
            if not need.change:
                require(token, need.op, need.on, namespace, stream)
                return await handler(request)
            return await self._change(request, handler, token, need, namespace, stream)

        return check

    async def _change(
        self,
        request: web.Request,
        handler: Handler,
        token: Token,
        need: Need,
        namespace: str | None,
        stream: str | None,
    ) -> web.StreamResponse:
        entry = {
            "action": f"{request.method} {request.match_info.route.resource.canonical}",  # type: ignore[union-attr]
            "target": dict(request.match_info),  # ns and stream, or bookie
            "query": dict(request.query),
            "subject": token.subject,
            "token_id": token.token_id,
            "from": request.remote,
        }
        try:
            if request.headers.get(CHANGE_HEADER) != "1":
                raise ForbiddenError(
                    f"a change through the console needs the header {CHANGE_HEADER}: 1 "
                    "(the console's own page sends it; another site's form cannot)"
                )
            require(token, "admin", need.on, namespace, stream)
            require(token, need.op, need.on, namespace, stream)
            answer = await handler(request)
        except GlobelogError as err:
            self.audit.write({**entry, "outcome": err.code, "detail": str(err)[:500]})
            raise
        except web.HTTPException as err:
            self.audit.write({**entry, "outcome": f"http {err.status}"})
            raise
        except BaseException as err:  # a proxy's refusal, a timeout (the outcome unknown), ...
            status = getattr(err, "status", None)
            outcome = f"proxy {status}" if status else f"{type(err).__name__} (outcome unknown)"
            self.audit.write({**entry, "outcome": outcome, "detail": str(err)[:500]})
            raise
        self.audit.write({**entry, "outcome": "ok", "status": answer.status})
        return answer


class AuditLog:
    """Changes made through the console, one JSON object per line, appended and flushed at
    once; rotated past AUDIT_BYTES_MAX (one older file kept, `.1`)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def write(self, entry: dict[str, Any]) -> None:
        line = json.dumps({"at_ms": int(time.time() * 1000), **entry}, sort_keys=True)
        log.info("audit: %s", line)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if self.path.exists() and self.path.stat().st_size > AUDIT_BYTES_MAX:
                os.replace(self.path, self.path.with_name(self.path.name + ".1"))
            with self.path.open("a", encoding="utf-8") as file:
                file.write(line + "\n")
        except OSError as err:  # the change is done: say loudly that its record is not
            log.error("audit log %s: %s; lost entry: %s", self.path, err, line)

    def newest(self, count: int = AUDIT_SHOWN_MAX) -> list[dict[str, Any]]:
        """The newest `count` entries, newest first (a line that does not parse is shown as
        it is)."""
        try:
            with self.path.open("rb") as file:
                file.seek(0, os.SEEK_END)
                file.seek(max(0, file.tell() - 512 * 1024))
                lines = file.read().decode(errors="replace").splitlines()
        except FileNotFoundError:
            return []
        found: list[dict[str, Any]] = []
        for line in reversed(lines[-count:]):
            try:
                found.append(json.loads(line))
            except ValueError:
                found.append({"unparsed": line})
        return found
