"""A small aiohttp application served on a free loopback port, for tests of HTTP clients."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from aiohttp import web


@asynccontextmanager
async def serving(app: web.Application, shutdown_timeout_s: float = 60.0) -> AsyncIterator[str]:
    """`app` served on 127.0.0.1 at a port the kernel picks; its base URL."""
    runner = web.AppRunner(app, shutdown_timeout=shutdown_timeout_s)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()
