"""What a failover run needs of the deployment it runs on, and nothing else.

The run (verify/run/run.py) is one program: producers and tailing readers through the proxies,
a nemesis, final reads through every region's read proxy and through the library, audits of
every segment's ensembles, and the checker. It runs on the local cluster's real processes
(verify/live/deployment.py) and on the deterministic simulation of globelog's own code
(verify/sim/deployment.py): each fills in this protocol, the proxies' addresses, how a client
reaches them, a ZooKeeper session for the library's reads and the audits, and the faults.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol, TypeVar

import aiohttp

from core.topology import Topology
from global_meta.session import MetaSession
from ledger import LedgerConfig
from region.client import ProxyClient

T = TypeVar("T")


class Faults(Protocol):
    """The nemesis's controls over the deployment's processes and network. A process is named
    as the topology names it (a proxy, a bookie); each call returns once the fault is in
    place (or undone), and may say what it did."""

    async def kill(self, name: str) -> object: ...
    async def restart(self, name: str) -> object: ...
    async def pause(self, name: str) -> object: ...
    async def resume(self, name: str) -> object: ...
    async def partition(self, a: str, b: str) -> object: ...
    async def heal(self) -> object: ...  # every partition and isolation
    async def isolate(self, region: str) -> object: ...
    async def region_down(self, region: str) -> object: ...
    async def region_up(self, region: str) -> object: ...
    async def slow(self, bookie: str, extra_ms: int) -> object: ...
    async def unslow(self) -> object: ...  # every slowed route
    async def expire_session(self, proxy: str) -> object: ...
    async def wipe(self, bookie: str) -> str: ...
    async def rebuilt(self, bookie_id: str, bound_s: float) -> str: ...
    async def revive(self, said: Callable[[str], None]) -> None:
        """Starts again every process that exited on its own (no fault holds it down now),
        as a deployment's supervisor does (systemd's Restart=on-failure); `said` gets each
        one started, with what is known of why it had stopped, as soon as it is."""
        ...


class Deployment(Protocol):
    @property
    def topology(self) -> Topology: ...

    @property
    def faults(self) -> Faults: ...

    def in_region(self, region: str, work: Coroutine[Any, Any, T]) -> Awaitable[T]:
        """`work` run by a client process in `region`: the simulation's hosts each have a
        region and its latencies; the local cluster's clients share one machine."""
        ...

    def write_urls(self, region: str) -> list[str]:
        """Every write proxy's URL, `region`'s own first (as a producer there lists them)."""
        ...

    def read_url(self, region: str) -> str:
        """The URL of `region`'s read proxy."""
        ...

    def client(self, urls: list[str], namespace: str, deadline_s: float) -> ProxyClient:
        """A ProxyClient of the proxies at `urls`, as a user of this deployment makes one."""
        ...

    def http(self) -> aiohttp.ClientSession:
        """An HTTP session for reading pages from the read proxies."""
        ...

    def meta_session(self, region: str) -> AbstractAsyncContextManager[MetaSession]:
        """A ZooKeeper session of a process in `region`, ended on exit."""
        ...

    def ledger_config(self, region: str) -> LedgerConfig:
        """The ledger client's settings of a process in `region`."""
        ...

    async def settle_rebuilding(self, bound_s: float) -> str:
        """Asks for a full check of the copies and waits until nothing is under-replicated,
        at most `bound_s`; says how it ended."""
        ...
