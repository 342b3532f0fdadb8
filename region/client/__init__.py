"""globelog's Python client of the proxies: writes through the write proxies (ProxyClient,
its idempotent Producer, BatchingWriter, SyncProxyClient) and reads through the read proxies
(ReadClient). Errors a proxy answers are raised as the library's classes (core.errors)."""

from core.errors import ProxyError, ProxyUnreachableError
from region.client.batching import BatchingWriter
from region.client.proxy_client import (
    Acked,
    Producer,
    ProxyClient,
    proxy_error,
)
from region.client.reads import ReadClient, ReadRecord
from region.client.sync import SyncProxyClient

__all__ = [
    "Acked",
    "BatchingWriter",
    "Producer",
    "ProxyClient",
    "ProxyError",
    "ProxyUnreachableError",
    "ReadClient",
    "ReadRecord",
    "SyncProxyClient",
    "proxy_error",
]
