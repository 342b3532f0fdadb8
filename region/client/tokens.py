"""Tokens through a write proxy's token service (region/security/service.py): issue, list, revoke.
The caller's own token (an `admin` scope) decides what it may issue and see."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from urllib.parse import quote

import aiohttp

from core.errors import ProxyUnreachableError
from core.security.credentials import auth_headers, client_ssl, default_token
from core.security.tokens import check_token_id
from region.client.proxy_client import proxy_error

TIMEOUT_S = 10.0


async def _call(
    proxies: Sequence[str], method: str, path: str, token: str | None, body: Any = None
) -> Any:
    """The first proxy that answers; its error if it refuses for good. The next proxy is
    asked after a retriable refusal (a proxy cut off from ZooKeeper) or no connection; after
    an issue request that may have reached a proxy (sent, no answer) it is not, so a token is
    not issued twice: ProxyUnreachableError says the outcome is unknown."""
    headers = auth_headers(token if token is not None else default_token())
    timeout = aiohttp.ClientTimeout(total=TIMEOUT_S)
    failures = []
    connector = aiohttp.TCPConnector(ssl=client_ssl())
    async with aiohttp.ClientSession(timeout=timeout, headers=headers, connector=connector) as http:
        for proxy in proxies:
            url = proxy.rstrip("/") + path
            try:
                async with http.request(method, url, json=body) as answer:
                    found = await answer.json(content_type=None)
                    if answer.status < 400:
                        return found
                    refused = proxy_error(found, answer.status, f"{method} {url}")
                    if not refused.retriable:
                        raise refused
                    failures.append(f"{url}: {refused.code}: {refused}")
            except aiohttp.ClientConnectorError as err:  # never sent
                failures.append(f"{url}: {type(err).__name__} {err}")
            except (aiohttp.ClientError, TimeoutError, ValueError) as err:
                failures.append(f"{url}: {type(err).__name__} {err}")
                if method == "POST":
                    raise ProxyUnreachableError(
                        f"{method} {url} got no answer; a token may have been issued (see "
                        f"globelog token list): {'; '.join(failures)}"
                    ) from err
    raise ProxyUnreachableError(f"no write proxy answered: {'; '.join(failures)}", maybe_sent=False)


async def issue_token(
    proxies: Sequence[str],
    subject: str,
    scope: dict[str, list[str]],
    ttl_s: float,
    token: str | None = None,
) -> dict[str, Any]:
    """{"token", "id", "sub", "scope", "exp"}: the token is shown here only."""
    body = {"subject": subject, "scope": scope, "ttl_s": ttl_s}
    return dict(await _call(proxies, "POST", "/v1/tokens", token, body))


async def list_tokens(proxies: Sequence[str], token: str | None = None) -> list[dict[str, Any]]:
    return list((await _call(proxies, "GET", "/v1/tokens", token))["tokens"])


async def revoke_token(
    proxies: Sequence[str], token_id: str, token: str | None = None
) -> dict[str, Any]:
    path = "/v1/tokens/" + quote(check_token_id(token_id), safe="")
    return dict(await _call(proxies, "DELETE", path, token))
