"""Reading streams through a region's read proxies: long-poll pages, retried on the next proxy,
for a bounded time, when a proxy is down or answers a retriable error.

    async with ReadClient(["https://127.0.0.1:8201"], "default") as reader:
        async for record in reader.read("orders", from_seq=0):
            ...                                            # ReadRecord(seq, dlsn, payload, ...)
"""

from __future__ import annotations

import asyncio
import base64
import ssl
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp

from core import runtime
from core.dlsn import DLSN
from core.errors import GlobelogError, ProxyUnreachableError
from core.security.credentials import TokenSource, client_ssl
from region.client.proxy_client import proxy_error

POLL_WAIT_MS = 1000
PAGE_RECORDS = 1000
RETRY_S = 0.2
# How long a read goes on failing (every proxy unreachable, or answering a retriable error)
# before it raises the last error: long enough for a proxy's restart or a ZooKeeper session's
# return after a heal, short enough that a reader is told its region cannot serve it.
READ_FAILING_MAX_S = 30.0


@dataclass(frozen=True, slots=True)
class ReadRecord:
    seq: int
    dlsn: DLSN
    txid: int
    payload: bytes
    write_time_ms: int
    writer_region: str
    producer_id: int | None = None
    producer_seq: int | None = None


class ReadClient:
    """Reads streams through a region's read proxies (long-poll pages), retrying through a
    proxy's restart or a region's outage on the next proxy of the list."""

    def __init__(
        self,
        proxies: Sequence[str],
        namespace: str = "default",
        failing_max_s: float = READ_FAILING_MAX_S,
        token: str | None = None,
        tls: ssl.SSLContext | bool | None = None,
        connector: Callable[[], aiohttp.BaseConnector] | None = None,
    ) -> None:
        """`token`: sent with every request; `tls`: what HTTPS proxies are verified with. By
        default the environment's (core/security/credentials.py). `connector`: as
        ProxyClient's."""
        if not proxies:
            raise ValueError("ReadClient needs at least one read proxy URL, got none")
        self._tokens = TokenSource(token) if token is not None else TokenSource.default()
        self._tls = tls if tls is not None else client_ssl()
        if not 0 < failing_max_s <= 3600:
            raise ValueError(f"failing_max_s {failing_max_s}: expected 0 < seconds <= 3600")
        self.namespace = namespace
        self.failing_max_s = failing_max_s
        self._proxies = [p.rstrip("/") for p in proxies]
        self._http: aiohttp.ClientSession | None = None
        self._connector = connector

    async def __aenter__(self) -> ReadClient:
        timeout = aiohttp.ClientTimeout(total=POLL_WAIT_MS / 1000 + 10)
        connector = (
            aiohttp.TCPConnector(ssl=self._tls) if self._connector is None else self._connector()
        )
        self._http = aiohttp.ClientSession(timeout=timeout, connector=connector)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._http is not None:
            await self._http.close()

    async def read(
        self, stream: str, from_seq: int = 0, follow: bool = True
    ) -> AsyncIterator[ReadRecord]:
        """Every record from sequence id `from_seq` on, in order; with `follow`, waits for
        new ones for ever, else stops at the first empty page. Failures (a proxy down, a
        retriable answer) are retried on the next proxy; after `failing_max_s` of nothing but
        failures the last one is raised, a non-retriable answer at once."""
        if self._http is None:
            raise RuntimeError("use `async with ReadClient(...)` before reading")
        seq = from_seq
        proxy = runtime.new_rng().randrange(len(self._proxies))
        failing_since: float | None = None
        while True:
            url = f"{self._proxies[proxy]}/v1/namespaces/{self.namespace}/streams/{stream}/records"
            query = {"from_seq": str(seq), "max": str(PAGE_RECORDS), "wait_ms": str(POLL_WAIT_MS)}
            try:
                async with self._http.get(
                    url, params=query, headers=self._tokens.headers()
                ) as answer:
                    page = await answer.json(content_type=None)
                    if answer.status != 200:
                        raise proxy_error(page, answer.status, f"GET {url} from_seq={seq}")
            except (aiohttp.ClientError, TimeoutError, ValueError, GlobelogError) as err:
                if isinstance(err, GlobelogError) and not err.retriable:
                    raise
                now = runtime.monotonic()
                failing_since = now if failing_since is None else failing_since
                if now - failing_since >= self.failing_max_s:
                    where = (
                        f"read {stream!r} from seq {seq}: no read proxy of {self._proxies} "
                        f"served it for {now - failing_since:.1f} s"
                    )
                    if isinstance(err, GlobelogError):
                        err.add_note(where)
                        raise
                    raise ProxyUnreachableError(f"{where}; the last failure: {err!r}") from err
                proxy = (proxy + 1) % len(self._proxies)
                await asyncio.sleep(RETRY_S)
                continue
            failing_since = None
            records = page["records"]
            for body in records:
                yield _record(body)
            if records:
                seq = records[-1]["seq"] + 1
            elif not follow:
                return


def _record(body: dict[str, Any]) -> ReadRecord:
    payload = (
        body["payload"].encode() if "payload" in body else base64.b64decode(body["payload_b64"])
    )
    return ReadRecord(
        int(body["seq"]), DLSN.parse(body["dlsn"]), int(body["txid"]), payload,
        int(body["write_time_ms"]), str(body["region"]),
        body.get("producer_id"), body.get("producer_seq"),
    )  # fmt: skip
