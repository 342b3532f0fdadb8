"""What globelog's code asks of a metadata session: the seam between the code that keeps
streams and ledgers and the store that keeps their metadata.

`global_meta.store.MetaStore` fills it with a kazoo session to a real ZooKeeper ensemble; the
deterministic simulation (`verify/sim/io/zookeeper.py`) fills it with a simulated ensemble, so
the drivers, writers, readers and ownership run there unchanged. Code that only keeps streams
and ledgers takes a `MetaSession`; code that administers the ensemble itself (dynamic
reconfiguration, logins) takes a `MetaStore`.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from typing import Protocol

from global_meta.store import NodeStat, Op, SessionEvents


class MetaSession(Protocol):
    isolation_check: Callable[[], Awaitable[bool]] | None

    @property
    def session_id(self) -> int | None: ...

    async def close(self) -> None: ...

    async def create(
        self,
        path: str,
        data: bytes = b"",
        *,
        ephemeral: bool = False,
        sequential: bool = False,
        make_parents: bool = False,
    ) -> str: ...

    async def sync(self, path: str) -> None: ...

    async def ensure_path(self, path: str) -> None: ...

    async def get(self, path: str) -> tuple[bytes, NodeStat]: ...

    async def get_many(self, paths: Sequence[str]) -> list[tuple[bytes, NodeStat] | None]: ...

    async def exists(self, path: str) -> NodeStat | None: ...

    async def children(self, path: str) -> list[str]: ...

    async def set(self, path: str, data: bytes, *, version: int) -> NodeStat: ...

    async def delete(self, path: str, *, version: int, recursive: bool = False) -> None: ...

    async def commit(self, ops: Sequence[Op]) -> list[str | NodeStat | bool]: ...

    def watch_data(self, path: str) -> AsyncGenerator[tuple[bytes, NodeStat] | None, None]: ...

    def watch_children(self, path: str) -> AsyncGenerator[list[str], None]: ...

    def session_events(self) -> SessionEvents: ...
