"""The proxy client for synchronous code: an event loop on a thread of its own runs each call.

with SyncProxyClient(["https://127.0.0.1:8101"]) as client:
    client.write("orders", b"payload")                 # blocks until acknowledged
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Sequence
from typing import Any, TypeVar

from core.dlsn import DLSN
from region.client.proxy_client import Acked, ProxyClient

T = TypeVar("T")


class SyncProxyClient:
    """ProxyClient for synchronous code: an event loop on a thread of its own runs each call;
    every method blocks until its answer (or raises the same errors)."""

    def __init__(self, proxies: Sequence[str], namespace: str = "default", **options: Any) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._client = ProxyClient(proxies, namespace, **options)
        self._run(self._client.__aenter__())

    def _run(self, call: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(call, self._loop).result()

    def __enter__(self) -> SyncProxyClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._loop.is_running():
            self._run(self._client.close())
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)
            self._loop.close()

    def create(self, stream: str) -> None:
        self._run(self._client.create(stream))

    def write(self, stream: str, payload: bytes, **options: Any) -> Acked:
        return self._run(self._client.write(stream, payload, **options))

    def write_bulk(self, stream: str, payloads: Sequence[bytes], **options: Any) -> list[Acked]:
        return self._run(self._client.write_bulk(stream, payloads, **options))

    def describe(self, stream: str) -> dict[str, Any]:
        return self._run(self._client.describe(stream))

    def last_dlsn(self, stream: str) -> DLSN | None:
        return self._run(self._client.last_dlsn(stream))
