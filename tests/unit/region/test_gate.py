"""Every route of both proxies has an access rule, and a route added without one stops the
proxy from being built (region/security/gate.py)."""

from __future__ import annotations

import pytest
from aiohttp import web

from core.errors import ConfigError
from region import read_proxy, write_proxy
from region.security.gate import require_rules

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
