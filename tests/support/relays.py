"""A TCP relay a test can cut, to play a ZooKeeper server (or any server) out of service for
one client while the shared cluster goes on."""

from __future__ import annotations

import asyncio


class Cuttable:
    """A TCP relay to a ZooKeeper server that can play a server out of service: `cut()`
    drops every connection and then accepts and at once closes new ones (as a server
    electing a leader, or cut from the quorum, does to its clients)."""

    def __init__(self, upstream: str) -> None:
        self.host, port = upstream.rsplit(":", 1)
        self.port = int(port)
        self.is_cut = False
        self._writers: set[asyncio.StreamWriter] = set()
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> str:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self.cut()
        self._server.close()
        await self._server.wait_closed()

    def cut(self) -> None:
        self.is_cut = True
        for writer in list(self._writers):
            writer.transport.abort()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.is_cut:
            writer.transport.abort()
            return
        up_reader, up_writer = await asyncio.open_connection(self.host, self.port)
        self._writers |= {writer, up_writer}

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                dst.transport.abort()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        self._writers -= {writer, up_writer}
