"""The token client: a proxy that refuses for a while is passed over, a refusal for good is
raised, and an issue request that may have reached a proxy is never sent to a second one."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web

from core.errors import BadRequestError, ProxyUnreachableError
from region.client.tokens import issue_token, list_tokens
from tests.support.loopback import serving

pytestmark = pytest.mark.unit
SCOPE = {"namespaces": ["*"], "streams": ["*"], "ops": ["read"]}


def proxy(
    answer: web.Response | None, calls: list[str], release: asyncio.Event | None = None
) -> web.Application:
    async def handle(request: web.Request) -> web.StreamResponse:
        calls.append(request.method)
        if answer is None:  # takes the request and answers only once released
            assert release is not None
            await release.wait()
            return web.json_response({})
        return answer

    app = web.Application()
    app.router.add_route("*", "/v1/tokens", handle)
    return app


def refusal(status: int, code: str, retriable: bool) -> web.Response:
    body = {"code": code, "message": "no", "retriable": retriable, "outcome": "not_applied"}
    return web.json_response(body, status=status)


async def test_a_retriable_refusal_passes_to_the_next_proxy_and_one_for_good_is_raised() -> None:
    calls: list[str] = []
    cut_off = refusal(503, "metadata_unavailable", True)
    listed = web.json_response({"tokens": []})
    async with serving(proxy(cut_off, calls)) as first, serving(proxy(listed, calls)) as second:
        assert await list_tokens([first, second], token="t") == []
    assert calls == ["GET", "GET"]
    async with serving(proxy(refusal(400, "bad_request", False), calls)) as bad:
        with pytest.raises(BadRequestError):
            await issue_token([bad, bad], "s", SCOPE, 60, token="t")


async def test_an_issue_with_no_answer_is_not_sent_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("region.client.tokens.TIMEOUT_S", 0.3)
    calls: list[str] = []
    async with (
        serving(proxy(None, calls), 0.1) as silent,
        serving(proxy(None, calls), 0.1) as other,
    ):
        with pytest.raises(ProxyUnreachableError, match="may have been issued"):
            await issue_token([silent, other], "s", SCOPE, 60, token="t")
    assert calls == ["POST"], "one proxy only"
