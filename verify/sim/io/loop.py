"""A deterministic asyncio event loop: virtual time, simulated hosts, no threads, no sockets.

globelog's production code (the ledger drivers, writers, readers, ownership) runs on it as it
runs on uvloop. What differs is what lies under the loop:

- **Time is virtual.** `time()` starts at 0 and jumps to the next timer whenever nothing is
  ready, so a minute of timeouts and retries takes milliseconds. The order in which callbacks
  run is asyncio's own (FIFO ready queue, timers by deadline, ties in the order they were
  set), so one seed replays the same run.
- **Every callback belongs to one life of a host.** A host is one simulated process (a proxy,
  a bookie, a client); its code runs in a `contextvars.Context` naming its current `Life`, and
  every callback scheduled from it (task steps, timers, future callbacks) carries that context.
  A crash ends the life: none of its callbacks runs again, whoever wakes them (its memory is
  gone, no cleanup code of it runs, as after SIGKILL); a restart begins a new one. A paused
  host (SIGSTOP) keeps its callbacks, and they run when it resumes.
- **Sockets are simulated** (`verify.sim.io.network`): `create_connection`, `create_server`
  (aiohttp's servers) and `getaddrinfo` go through the network's latencies and cuts.
- **Threads are refused**: `run_in_executor`, and `call_soon_threadsafe` from another thread,
  raise, since a thread would make a run depend on the OS scheduler.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import math
import random
import selectors
import socket
import sys
import threading
import weakref
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from verify.sim.io.network import Network

T = TypeVar("T")

# Virtual wall clock of second 0 (2027-01-01T00:00:00Z): what `time.time()`-style readings of
# the simulated code see, so times written into records are deterministic too.
WALL_EPOCH_S = 1_798_761_600.0


class SimulationError(RuntimeError):
    """The simulated code did something the simulation cannot replay (a thread), or waits
    for something that can never happen."""


class StuckError(SimulationError):
    """Nothing is ready and no timer is set: every task waits on something no one will do."""


class SpinningError(SimulationError):
    """Callbacks keep running and virtual time never moves: a loop that retries at once for
    ever (it would spin a real process's CPU too)."""


# Turns of the loop without virtual time moving before the run is called spinning: a seed of
# the failover run takes about 50,000 turns in all.
SPIN_TURNS_MAX = 2_000_000


@dataclass(eq=False, slots=True)
class Host:
    """One simulated process, on a host in `region` at `ip`."""

    name: str
    region: str
    ip: str
    up: bool = True
    paused: bool = False
    incarnation: int = 0  # bumped at each crash: callbacks of an earlier life are dropped
    # while down, whether its machine still answers (connections refused at once) or is gone
    # (connections and requests to it just time out)
    machine_up: bool = True
    held: list[tuple[Callable[..., object], tuple[Any, ...], contextvars.Context | None]] = field(
        default_factory=list
    )
    context: contextvars.Context = field(default_factory=contextvars.Context)
    tasks: weakref.WeakSet[asyncio.Task[Any]] = field(default_factory=weakref.WeakSet)

    def __repr__(self) -> str:
        return f"Host({self.name}@{self.region})"


@dataclass(eq=False, slots=True)
class Life:
    """One run of a host's process, from its start to its crash: what its code's context names."""

    host: Host
    incarnation: int

    @property
    def alive(self) -> bool:
        return self.host.incarnation == self.incarnation


LIFE: contextvars.ContextVar[Life | None] = contextvars.ContextVar("sim_life", default=None)


def current_host() -> Host | None:
    """The host whose code is running (None: the simulation's own)."""
    life = LIFE.get()
    return None if life is None else life.host


def _life_of(context: contextvars.Context | None) -> Life | None:
    return LIFE.get() if context is None else context.get(LIFE)


class _Guarded:
    """A callback that runs only while the life that scheduled it lasts (while its host is
    paused, later)."""

    __slots__ = ("callback", "context", "life")

    def __init__(
        self, life: Life, callback: Callable[..., object], context: contextvars.Context | None
    ) -> None:
        self.life = life
        self.callback = callback
        self.context = context

    def __call__(self, *args: Any) -> None:
        life = self.life
        if not life.alive:
            return  # the process that set it crashed since
        if life.host.paused:
            life.host.held.append((self.callback, args, self.context))
            return
        self.callback(*args)


class _VirtualSelector:
    """Stands in for the OS's selector: no file descriptor ever becomes ready, and waiting
    for the next timer is virtual time jumping to it."""

    def __init__(self, loop: SimLoop) -> None:
        self._loop = loop
        self._still = 0  # turns since virtual time last moved

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is None:
            raise StuckError(
                f"at {self._loop.time():.3f} s nothing is ready and no timer is set: every "
                "task waits for something no simulated host will do"
            )
        if timeout > 0:
            self._loop.advance(timeout)
            self._still = 0
        else:
            self._still += 1
            if self._still > SPIN_TURNS_MAX:
                raise SpinningError(
                    f"at {self._loop.time():.3f} s the loop turned {SPIN_TURNS_MAX} times "
                    "without virtual time moving: something retries at once, for ever"
                )
        return []

    def close(self) -> None:
        pass


class SimLoop(asyncio.BaseEventLoop):
    """The deterministic loop of seed `seed`; `network` is set by `verify.sim.io.network.Network`.

    `core.runtime` reads its clocks and its random source (`virtual_time`)."""

    virtual_time = True

    def __init__(self, seed: int) -> None:
        super().__init__()
        self.seed = seed
        self.rng = random.Random(seed)
        self._selector = _VirtualSelector(self)
        self._now = 0.0
        self.network: Network | None = None
        self.hosts: dict[str, Host] = {}
        self.frozen: list[asyncio.Task[Any]] = []  # tasks of crashed hosts, kept to the end

    # -- time ------------------------------------------------------------------------------

    def time(self) -> float:
        return self._now

    def wall_time(self) -> float:
        """The simulated wall clock (seconds since the epoch), for times written into data."""
        return WALL_EPOCH_S + self._now

    def advance(self, seconds: float) -> None:
        assert seconds >= 0 and math.isfinite(seconds), seconds
        self._now += seconds

    # -- hosts -----------------------------------------------------------------------------

    def add_host(self, name: str, region: str, ip: str) -> Host:
        assert name not in self.hosts, name
        host = Host(name, region, ip)
        self._new_life(host)
        self.hosts[name] = host
        return host

    def _new_life(self, host: Host) -> None:
        host.context = contextvars.Context()
        host.context.run(LIFE.set, Life(host, host.incarnation))

    def spawn(
        self, host: Host, coro: Coroutine[Any, Any, T], name: str | None = None
    ) -> asyncio.Task[T]:
        """Runs `coro` as a task of `host`: it and everything it starts belong to the host."""
        return self.create_task(coro, name=name or host.name, context=host.context.copy())

    def crash(self, host: Host, *, machine_up: bool = True) -> None:
        """SIGKILL: no callback of the host runs again; its listeners and connections go
        (peers see a reset if its machine is up, nothing at all if not)."""
        host.up = False
        host.machine_up = machine_up
        host.paused = False
        host.held.clear()
        host.incarnation += 1
        # Its tasks wait for ever; kept, or they would be collected (and reported) mid-run.
        self.frozen.extend(host.tasks)
        host.tasks = weakref.WeakSet()
        if self.network is not None:
            self.network.host_crashed(host)

    def restart(self, host: Host) -> None:
        """The host's process starts again, with nothing of the crashed one (spawn its code)."""
        host.up = True
        host.machine_up = True
        self._new_life(host)

    def pause(self, host: Host) -> None:
        host.paused = True

    def resume(self, host: Host) -> None:
        host.paused = False
        held, host.held = host.held, []
        for callback, args, context in held:
            self.call_soon(callback, *args, context=context)

    # -- scheduling: every callback guarded by its host ------------------------------------

    def create_task(  # type: ignore[override]
        self,
        coro: Coroutine[Any, Any, T],
        *,
        name: str | None = None,
        context: contextvars.Context | None = None,
    ) -> asyncio.Task[T]:
        task = super().create_task(coro, name=name, context=context)
        life = _life_of(context)
        if life is not None:
            life.host.tasks.add(task)
        return task

    def call_soon(  # type: ignore[override]
        self,
        callback: Callable[..., object],
        *args: Any,
        context: contextvars.Context | None = None,
    ) -> asyncio.Handle:
        return super().call_soon(self._guard(callback, context), *args, context=context)

    def call_at(  # type: ignore[override]
        self,
        when: float,
        callback: Callable[..., object],
        *args: Any,
        context: contextvars.Context | None = None,
    ) -> asyncio.TimerHandle:
        return super().call_at(when, self._guard(callback, context), *args, context=context)

    def _guard(
        self, callback: Callable[..., object], context: contextvars.Context | None
    ) -> Callable[..., object]:
        life = _life_of(context)
        if life is None:
            return callback  # the simulation's own (the world, the nemesis)
        return _Guarded(life, callback, context)

    # -- what a simulation must not do -----------------------------------------------------

    def call_soon_threadsafe(  # type: ignore[override]
        self,
        callback: Callable[..., object],
        *args: Any,
        context: contextvars.Context | None = None,
    ) -> asyncio.Handle:
        """From the loop's own thread only (asyncio closes a collected async generator this
        way); from any other thread it is a thread the simulation would not replay."""
        if threading.get_ident() != getattr(self, "_thread_id", None):
            raise SimulationError(f"call_soon_threadsafe({callback!r}): threads are not simulated")
        return self.call_soon(callback, *args, context=context)

    def run_in_executor(  # type: ignore[override]
        self, executor: Any, func: Callable[..., T], *args: Any
    ) -> asyncio.Future[T]:
        raise SimulationError(f"run_in_executor({func!r}): threads are not simulated")

    def _write_to_self(self) -> None:
        pass

    def _process_events(self, event_list: list[Any]) -> None:
        pass

    # -- sockets ---------------------------------------------------------------------------

    async def create_connection(  # type: ignore[override]
        self,
        protocol_factory: Callable[[], asyncio.BaseProtocol],
        host: str | None = None,
        port: int | None = None,
        **options: Any,
    ) -> tuple[asyncio.Transport, asyncio.BaseProtocol]:
        if options.get("ssl") is not None:
            raise SimulationError("TLS is not simulated: run the simulated cluster in clear")
        if self.network is None or host is None or port is None:
            raise SimulationError("create_connection needs a simulated network and an address")
        return await self.network.connect(protocol_factory, host, port)

    async def create_server(  # type: ignore[override]
        self,
        protocol_factory: Callable[[], asyncio.BaseProtocol],
        host: Any = None,
        port: int | None = None,
        **options: Any,
    ) -> SimServer:
        """Listens at the calling host's address and `port` (aiohttp's sites call this)."""
        listener = current_host()
        if options.get("ssl") is not None:
            raise SimulationError("TLS is not simulated: run the simulated cluster in clear")
        if self.network is None or listener is None or port is None:
            raise SimulationError("create_server needs a simulated network, a host and a port")
        if host not in (None, listener.ip, "0.0.0.0"):
            raise SimulationError(f"host {listener.name} ({listener.ip}) cannot listen at {host}")
        self.network.listen(listener, port, protocol_factory)  # type: ignore[arg-type]
        return SimServer(self, listener, port)

    async def getaddrinfo(
        self,
        host: Any,
        port: Any,
        *,
        family: int = 0,
        type: int = 0,
        proto: int = 0,
        flags: int = 0,
    ) -> list[tuple[Any, ...]]:
        """Numeric addresses only (every simulated host has one); no resolver thread."""
        return [(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (host, port))]


class SimServer:
    """What `create_server` returns, as much of asyncio.Server as aiohttp uses."""

    def __init__(self, loop: SimLoop, host: Host, port: int) -> None:
        self._loop = loop
        self.host = host
        self.port = port
        self.sockets: list[Any] = []

    def get_loop(self) -> SimLoop:
        return self._loop

    def is_serving(self) -> bool:
        return self.host.up

    def close(self) -> None:
        if self._loop.network is not None:
            self._loop.network.unlisten(self.host, self.port)

    async def wait_closed(self) -> None:
        pass

    async def start_serving(self) -> None:
        pass


def run(loop: SimLoop, main: Coroutine[Any, Any, T]) -> T:
    """Runs `main` (the simulation's driver, no host's) to its end on `loop`, then closes it.

    The tasks still pending then (every host's, crashed ones' included) never run again: their
    coroutines are closed in silence, so no cleanup code of theirs runs outside the run and
    nothing of them is reported when they are collected."""
    asyncio.set_event_loop(loop)
    try:
        return loop.run_until_complete(main)
    finally:
        asyncio.set_event_loop(None)
        loop.set_exception_handler(lambda _loop, _context: None)
        leftovers = [t for t in (*loop.frozen, *asyncio.all_tasks(loop)) if not t.done()]
        loop.close()
        _close_quietly(leftovers)


def _close_quietly(tasks: list[asyncio.Task[Any]]) -> None:
    """Closes the coroutines of tasks that will never run again, with their logs and the
    interpreter's "exception ignored" reports muted (their cleanup has no loop to run on)."""
    hook = sys.unraisablehook
    logging.disable(logging.CRITICAL)
    sys.unraisablehook = lambda _unraisable: None
    try:
        for task in tasks:
            task._log_destroy_pending = False  # type: ignore[attr-defined]  # it never runs again
            with contextlib.suppress(BaseException):
                task.get_coro().close()
    finally:
        sys.unraisablehook = hook
        logging.disable(logging.NOTSET)
