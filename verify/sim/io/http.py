"""HTTP between simulated hosts: aiohttp's own servers and clients, over simulated TCP.

A proxy's aiohttp application serves on the simulated loop as it does on uvloop
(`SimLoop.create_server`). aiohttp's client connects through a real socket of its own
(happy eyeballs), which a simulation must never open: `SimConnector` hands the connection to
the simulated network instead, and is the one thing a client in a simulation is given."""

from __future__ import annotations

from typing import Any

import aiohttp


class SimConnector(aiohttp.TCPConnector):
    async def _wrap_create_connection(
        self,
        *args: Any,
        addr_infos: list[Any],
        req: aiohttp.ClientRequest,
        timeout: aiohttp.ClientTimeout,  # noqa: ASYNC109 - aiohttp's signature; the caller's own timeout bounds the wait
        client_error: type[Exception] = aiohttp.ClientConnectorError,
        **kwargs: Any,
    ) -> Any:
        host, port = addr_infos[0][4][:2]
        factory = args[0]
        try:
            return await self._loop.create_connection(factory, host, port)
        except OSError as exc:
            raise client_error(req.connection_key, exc) from exc
