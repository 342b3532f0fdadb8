"""Records through the proxies, as every client reads them: the console asks its region's read
proxy (and, for changes, its write proxy) with the signed-in user's own token, so a proxy
refuses what the user may not do whatever the console shows.

    page(...)     one page from a position (seq, txid, DLSN, time, earliest)
    search(...)   records whose payload contains a text, over a bounded range
    export(...)   a range as JSON Lines, streamed
    tail(...)     records as they arrive, streamed (at most TAILS_MAX at once)

Every call has a deadline; a proxy's error answer is passed on as it came (its status and
its JSON), so the page shows the proxy's own words.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import ssl
import time
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import aiohttp

from core.errors import BadRequestError, OverCapacityError, ProxyUnreachableError

PAGE_RECORDS_MAX = 500  # a browser page
SEARCH_SCAN_DEFAULT = 10_000
SEARCH_SCAN_MAX = 100_000
SEARCH_MATCHES_MAX = 100
SEARCH_TEXT_CHARS_MAX = 200
EXPORT_RECORDS_MAX = 100_000
TAILS_MAX = 16
REQUEST_TIMEOUT_S = 15.0
SCAN_PAGE = 1000  # records per proxy page while searching or exporting
PROXY_PAGE_MAX = 10_000  # the read proxy's own page limit
END_SCAN_MAX = 200_000  # records read to find a stream's end (a live tail's start)
READ_BUFFER_BYTES = 4 * 1024 * 1024
FIRST_WAIT_MS = 1000  # a scan's first page waits this long for a cold read-ahead
HIDDEN = "(hidden: this namespace's payloads are not shown)"


@dataclass
class ProxyAnswerError(Exception):
    """A proxy's error answer, passed on to the browser as it came."""

    status: int
    body: bytes

    def __str__(self) -> str:
        return f"proxy answered {self.status}: {self.body[:300].decode(errors='replace')}"


def position_query(position: str) -> dict[str, str]:
    """The read proxy's query for a position the user typed: a plain number is a sequence id;
    `seq:N`, `txid:T`, `dlsn:S.E.T` (or `S.E.T`), `time:MS` (epoch milliseconds), `earliest`."""
    text = position.strip()
    if text in ("", "earliest"):
        return {"from": "earliest"}
    if _number(text):
        return {"from_seq": text}
    kind, _, value = text.partition(":")
    if kind == "seq" and _number(value):
        return {"from_seq": value}
    if kind in ("txid", "dlsn", "time") and value:
        return {"from": f"{kind}:{value}"}
    if text.count(".") == 2 and all(_number(p) for p in text.split(".")):
        return {"from": f"dlsn:{text}"}
    raise BadRequestError(
        f"position {position!r:.80}: expected a sequence id (42 or seq:42), txid:T, "
        "dlsn:S.E.T, time:MS (epoch milliseconds) or earliest"
    )


def _number(text: str) -> bool:
    return text.isascii() and text.isdecimal()


def bounded(value: str | None, name: str, default: int, most: int) -> int:
    if value is None or value == "":
        return default
    if not _number(value) or not 1 <= int(value) <= most:
        raise BadRequestError(f"{name}={value!r:.40}: expected a whole number 1..{most}")
    return int(value)


def payload_bytes(record: dict[str, Any]) -> bytes:
    if "payload_b64" in record:
        return base64.b64decode(record["payload_b64"])
    return str(record.get("payload", "")).encode()


class ProxyRelay:
    def __init__(self, read_url: str, write_url: str, tls: ssl.SSLContext | bool) -> None:
        self.read_url = read_url
        self.write_url = write_url
        self._tls = tls
        self._http: aiohttp.ClientSession | None = None
        self._tails = 0

    async def start(self) -> None:
        self._http = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=5.0, sock_read=None),
            connector=aiohttp.TCPConnector(ssl=self._tls, limit=64),
            # a tail's line holds one record: up to 1 MiB of payload, base64 in JSON
            read_bufsize=READ_BUFFER_BYTES,
        )

    async def stop(self) -> None:
        if self._http is not None:
            await self._http.close()

    @property
    def http(self) -> aiohttp.ClientSession:
        assert self._http is not None, "ProxyRelay used before start()"
        return self._http

    @staticmethod
    def _stream_path(namespace: str, stream: str) -> str:
        return f"/v1/namespaces/{quote(namespace, safe='')}/streams/{quote(stream, safe='')}"

    async def _get_json(self, url: str, token: str | None, query: dict[str, str]) -> Any:
        with unreachable(url):
            async with (
                asyncio.timeout(REQUEST_TIMEOUT_S),
                self.http.get(url, params=query, headers=_auth(token)) as answer,
            ):
                body = await answer.read()
                if answer.status != 200:
                    raise ProxyAnswerError(answer.status, body)
                return json.loads(body)

    async def page(
        self,
        token: str | None,
        namespace: str,
        stream: str,
        query: dict[str, str],
        count: int,
        wait_ms: int = FIRST_WAIT_MS,
    ) -> dict[str, Any]:
        """One page; the proxy waits up to `wait_ms` for its first record (a stream not yet
        read in this region has its read-ahead started by this very request)."""
        url = self.read_url + self._stream_path(namespace, stream) + "/records"
        found: dict[str, Any] = await self._get_json(
            url, token, {**query, "max": str(count), "wait_ms": str(wait_ms)}
        )
        return found

    async def end(
        self, token: str | None, namespace: str, stream: str, start: int
    ) -> dict[str, Any]:
        """The sequence id after the stream's last readable record, read from `start` (the
        first record of its in-progress segment) over at most END_SCAN_MAX records."""
        next_seq, scanned = start, 0
        query = {"from_seq": str(start)}
        wait_ms = FIRST_WAIT_MS
        while scanned < END_SCAN_MAX:
            page = await self.page(token, namespace, stream, query, PROXY_PAGE_MAX, wait_ms)
            records = page.get("records", [])
            if not records:
                return {"next_seq": next_seq, "scanned": scanned, "complete": True}
            scanned += len(records)
            next_seq = int(page["next_seq"])
            query, wait_ms = {"from_seq": str(next_seq)}, 0
        return {"next_seq": next_seq, "scanned": scanned, "complete": False}

    async def scan(
        self, token: str | None, namespace: str, stream: str, query: dict[str, str], most: int
    ) -> AsyncGenerator[dict[str, Any], None]:
        """Records from `query`'s position on, at most `most`, until the stream's end."""
        seen = 0
        wait_ms = FIRST_WAIT_MS
        while seen < most:
            count = min(SCAN_PAGE, most - seen)
            page = await self.page(token, namespace, stream, query, count, wait_ms)
            wait_ms = 0
            records = page.get("records", [])
            if not records:
                return
            for record in records:
                yield record
            seen += len(records)
            query = {"from_seq": str(page["next_seq"])}

    async def search(
        self,
        token: str | None,
        namespace: str,
        stream: str,
        query: dict[str, str],
        text: str,
        scan: int,
    ) -> dict[str, Any]:
        if not text or len(text) > SEARCH_TEXT_CHARS_MAX:
            raise BadRequestError(
                f"contains={text!r:.40}: expected 1..{SEARCH_TEXT_CHARS_MAX} characters"
            )
        needle = text.encode()
        matches: list[dict[str, Any]] = []
        scanned = 0
        last_seq = None
        async for record in self.scan(token, namespace, stream, query, scan):
            scanned += 1
            last_seq = record["seq"]
            if needle in payload_bytes(record):
                matches.append(record)
                if len(matches) >= SEARCH_MATCHES_MAX:
                    break
        return {
            "contains": text,
            "scanned": scanned,
            "last_scanned_seq": last_seq,
            "matches": matches,
            "complete": len(matches) < SEARCH_MATCHES_MAX and scanned < scan,
        }

    @contextlib.asynccontextmanager
    async def tail(
        self, token: str | None, namespace: str, stream: str, from_seq: int
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        """The read proxy's tail, once its answer's head came (within REQUEST_TIMEOUT_S);
        the caller reads its lines for as long as it wants (at most TAILS_MAX at once)."""
        if self._tails >= TAILS_MAX:
            raise OverCapacityError(f"{TAILS_MAX} live tails are open on this console; try later")
        self._tails += 1
        url = self.read_url + self._stream_path(namespace, stream) + "/tail"
        try:
            with unreachable(url):
                async with asyncio.timeout(REQUEST_TIMEOUT_S):
                    answer = await self.http.get(
                        url, params={"from_seq": str(from_seq)}, headers=_auth(token)
                    )
            try:
                if answer.status != 200:
                    with unreachable(url):
                        async with asyncio.timeout(REQUEST_TIMEOUT_S):
                            raise ProxyAnswerError(answer.status, await answer.read())
                yield answer
            finally:
                answer.close()
        finally:
            self._tails -= 1

    async def delivery_lag(
        self,
        token: str | None,
        namespace: str,
        stream: str,
        from_seq: int,
        readers: dict[str, str],
        seconds: int,
    ) -> dict[str, dict[str, Any]]:
        """Tails the stream from `from_seq` in every region's read proxy for `seconds`: for
        each, how long after its write each record arrived (this host's clock against the
        writer's; both NTP-kept in a deployment)."""

        async def one(url: str) -> dict[str, Any]:
            lags: list[float] = []
            path = url + self._stream_path(namespace, stream) + "/tail"
            try:
                async with (
                    asyncio.timeout(seconds),
                    self.http.get(
                        path, params={"from_seq": str(from_seq)}, headers=_auth(token)
                    ) as answer,
                ):
                    if answer.status != 200:
                        return {"error": f"{answer.status}: {(await answer.read())[:200]!r}"}
                    async for line in answer.content:
                        if line.strip():
                            record = json.loads(line)
                            if "write_time_ms" in record:
                                lags.append(time.time() * 1000 - record["write_time_ms"])
            except TimeoutError:
                pass  # the measurement's end
            except Exception as err:  # noqa: BLE001 - one region's failure is its row's
                return {"error": repr(err)[:200], "records": len(lags)}
            lags.sort()
            if not lags:
                return {"records": 0}
            return {
                "records": len(lags),
                "p50_ms": round(lags[len(lags) // 2], 1),
                "max_ms": round(lags[-1], 1),
            }

        if self._tails + len(readers) > TAILS_MAX:
            raise OverCapacityError(f"{TAILS_MAX} live tails are open on this console; try later")
        self._tails += len(readers)
        try:
            answers = await asyncio.gather(*(one(url) for url in readers.values()))
        finally:
            self._tails -= len(readers)
        return dict(zip(readers, answers, strict=True))

    async def change(
        self, token: str | None, method: str, namespace: str, stream: str, suffix: str,
        query: dict[str, str],
    ) -> Any:  # fmt: skip
        """A change through the write proxy (redirects to the owner followed)."""
        url = self.write_url + self._stream_path(namespace, stream) + suffix
        with unreachable(url):
            async with (
                asyncio.timeout(REQUEST_TIMEOUT_S),
                self.http.request(method, url, params=query, headers=_auth(token)) as answer,
            ):
                body = await answer.read()
                if answer.status not in (200, 201):
                    raise ProxyAnswerError(answer.status, body)
                return json.loads(body)


@contextlib.contextmanager
def unreachable(url: str) -> Iterator[None]:
    """A proxy that does not answer (refused, reset, no answer within the bound, not JSON)
    as the retriable `proxy_unreachable`, not an internal error."""
    try:
        yield
    except TimeoutError as err:
        raise ProxyUnreachableError(f"{url}: no answer in {REQUEST_TIMEOUT_S:g} s") from err
    except (aiohttp.ClientError, ValueError) as err:
        raise ProxyUnreachableError(f"{url}: {err!r:.300}") from err


def _auth(token: str | None) -> dict[str, str]:
    return {} if token is None else {"Authorization": f"Bearer {token}"}
