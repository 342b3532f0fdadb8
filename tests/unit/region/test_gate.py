"""Every route of both proxies has an access rule, and a route added without one stops the
proxy from being built (region/security/gate.py)."""

from __future__ import annotations

import time

import pytest
from aiohttp import web

from core.errors import ConfigError, UnauthenticatedError
from core.security.tokens import Scope, issue, new_signing_key
from region import read_proxy, write_proxy
from region.security import gate as gate_module
from region.security.gate import Gate, require_rules

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("kind", ["write", "read"])
def test_a_route_without_a_rule_cannot_be_served(kind: str) -> None:
    rules = write_proxy.RULES if kind == "write" else read_proxy.RULES

    async def handler(_: web.Request) -> web.Response:
        return web.Response()

    app = web.Application()
    for method, path in rules:
        app.router.add_route(method, path, handler)
    require_rules(app, rules)
    app.router.add_post("/v1/new-thing", handler)
    with pytest.raises(ConfigError, match="routes without a rule"):
        require_rules(app, rules)


def test_the_verified_tokens_kept_are_bounded_and_still_checked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(gate_module, "VERIFIED_MAX", 8)
    key, now = new_signing_key(), time.time()
    revoked: set[str] = set()
    gate = Gate(key.public_key(), lambda: frozenset(revoked), clock=lambda: now)
    tokens = [issue(key, f"s{i}", Scope.everything(), now, 60) for i in range(20)]
    for raw, _ in tokens:
        gate.authenticate(f"Bearer {raw}")
    assert len(gate._verified) == 8, "the oldest verified tokens are dropped"
    raw, claims = tokens[-1]
    revoked.add(claims.token_id)  # kept, but revocation is checked on every use
    with pytest.raises(UnauthenticatedError, match="revoked"):
        gate.authenticate(f"Bearer {raw}")
