"""Simulated TCP between simulated hosts: latency, jitter, cuts and resets, in order.

A connection is two pipes. Bytes written into a pipe arrive after the link's one-way latency
(times a seeded jitter factor), never before bytes written earlier (TCP's order). While the
link is cut, bytes wait and are retransmitted every `RETRANSMIT_S`, so a short cut delays them
and a long one ends in the reader's own timeout, as on a real network. A host that crashes
while its machine stays up resets its connections (the peer sees ECONNRESET one latency later)
and refuses new ones; a machine that goes away says nothing at all.
"""

from __future__ import annotations

import asyncio
import contextvars
import random
from collections import deque
from collections.abc import Callable
from typing import Any

from verify.sim.io.loop import Host, SimLoop, current_host

LOCAL_S = 0.0002  # one way inside a region (same rack or not: the model has no racks)
JITTER = 0.3  # each delay is the latency times a factor in [1 - JITTER, 1 + JITTER]
RETRANSMIT_S = 0.2  # how often bytes held by a cut are tried again
CONNECT_REFUSED = "connection refused"
_EOF = None  # pipe markers; a write of no bytes sends nothing
_RESET = bytes(bytearray(b"RST"))  # compared by identity: never equal to sent bytes


class Network:
    def __init__(
        self, loop: SimLoop, rng: random.Random, wan_s: dict[frozenset[str], float]
    ) -> None:
        self.loop = loop
        self.rng = rng
        self.wan_s = wan_s  # one-way latency between two regions
        self.cut: set[frozenset[str]] = set()  # region pairs that cannot reach each other
        self.slowed: dict[str, float] = {}  # host name -> extra one-way seconds to other regions
        self._listeners: dict[tuple[str, int], tuple[Host, Callable[[], asyncio.Protocol]]] = {}
        self._connections: list[_Connection] = []
        self.bytes_delivered = 0
        loop.network = self

    # -- the model -------------------------------------------------------------------------

    def reachable(self, a: Host | None, b: Host) -> bool:
        if a is None or a.region == b.region or not self.cut:
            return True
        return frozenset((a.region, b.region)) not in self.cut

    def latency_s(self, a: Host | None, b: Host | None) -> float:
        if a is None or b is None or a.region == b.region:
            base = LOCAL_S
        else:
            base = self.wan_s[frozenset((a.region, b.region))]
            if self.slowed:
                base += self.slowed.get(a.name, 0.0) + self.slowed.get(b.name, 0.0)
        return base * (1 + self.rng.uniform(-JITTER, JITTER))

    # -- listening and connecting ------------------------------------------------------------

    def listen(self, host: Host, port: int, factory: Callable[[], asyncio.Protocol]) -> None:
        """`host` accepts connections at its ip and `port`, each served by a new protocol."""
        self._listeners[(host.ip, port)] = (host, factory)

    def unlisten(self, host: Host, port: int) -> None:
        listener = self._listeners.get((host.ip, port))
        if listener is not None and listener[0] is host:
            del self._listeners[(host.ip, port)]

    async def connect(
        self, factory: Callable[[], asyncio.BaseProtocol], ip: str, port: int
    ) -> tuple[asyncio.Transport, asyncio.BaseProtocol]:
        """The client side of a new connection from the calling host (None: the simulation
        itself) to `ip:port`, after one round trip; ConnectionRefusedError as a real one."""
        source = current_host()
        while True:  # SYNs to a machine that is gone or cut off go unanswered, and are resent
            target = self._host_at(ip)
            if target is None or (target.machine_up and self.reachable(source, target)):
                break
            await asyncio.sleep(RETRANSMIT_S)  # the caller's own timeout ends the wait
        if target is None:
            await asyncio.sleep(2 * LOCAL_S)
        else:
            await asyncio.sleep(self.latency_s(source, target) + self.latency_s(target, source))
        listener = self._listeners.get((ip, port))
        if listener is None or not listener[0].up:
            raise ConnectionRefusedError(111, f"{CONNECT_REFUSED}: nothing listens at {ip}:{port}")
        server, serve = listener
        client_protocol = factory()
        server_protocol = server.context.run(serve)
        connection = _Connection(self, source, server, port)
        self._connections.append(connection)
        client_end, server_end = connection.ends(client_protocol, server_protocol)
        server.context.run(server_protocol.connection_made, server_end)
        client_protocol.connection_made(client_end)
        return client_end, client_protocol

    def refuse(self, host: Host, port: int) -> None:
        """From now on `host`'s `port` refuses connections while its process runs on (a
        firewall's REJECT, a load balancer with no ready endpoint): new connections are
        refused, and the open ones reset."""
        self.unlisten(host, port)
        for connection in list(self._connections):
            if connection.server is host and connection.port == port:
                connection.reset()

    def _host_at(self, ip: str) -> Host | None:
        return next((host for host in self.loop.hosts.values() if host.ip == ip), None)

    def host_crashed(self, host: Host) -> None:
        for key in [key for key, (owner, _) in self._listeners.items() if owner is host]:
            del self._listeners[key]
        for connection in list(self._connections):
            if host in (connection.client, connection.server):
                connection.lost_host(host)

    def forget(self, connection: _Connection) -> None:
        if connection in self._connections:
            self._connections.remove(connection)


class _Connection:
    def __init__(self, network: Network, client: Host | None, server: Host, port: int) -> None:
        self.network = network
        self.client = client
        self.server = server
        self.port = port  # the server's
        self.ends_: tuple[SimTransport, SimTransport] | None = None

    def ends(
        self, client_protocol: asyncio.BaseProtocol, server_protocol: asyncio.BaseProtocol
    ) -> tuple[SimTransport, SimTransport]:
        to_server = _Pipe(self.network, self.client, self.server, server_protocol)
        to_client = _Pipe(self.network, self.server, self.client, client_protocol)
        client_end = SimTransport(self, to_server, to_client, client_protocol)
        server_end = SimTransport(self, to_client, to_server, server_protocol)
        client_end.peer = (self.server.ip, self.port)
        # the simulation's own driver has no host: it speaks from the loopback address
        server_end.peer = ("127.0.0.1" if self.client is None else self.client.ip, 0)
        self.ends_ = (client_end, server_end)
        return client_end, server_end

    def reset(self) -> None:
        """Both ends hear a reset (a firewall's REJECT of an established flow)."""
        assert self.ends_ is not None
        for end in self.ends_:
            end.outbound.push(_RESET)
        self.network.forget(self)

    def lost_host(self, host: Host) -> None:
        """`host` crashed: its end is gone; the other end hears a reset if its machine is up."""
        assert self.ends_ is not None
        client_end, server_end = self.ends_
        dead = client_end if host is self.client else server_end
        dead.drop()
        if host.machine_up:
            dead.outbound.push(_RESET)  # the machine's kernel answers for the dead process
        self.network.forget(self)


class _Pipe:
    """One direction of a connection: bytes in order, each after its latency."""

    def __init__(
        self, network: Network, source: Host | None, target: Host | None, receiver: Any
    ) -> None:
        self.network = network
        self.source = source
        self.target = target
        self.receiver = receiver
        self._chunks: deque[tuple[float, bytes | None]] = deque()
        self._last_arrival = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self.broken = False

    def push(self, data: bytes | None) -> None:
        """Sends `data`, or _EOF (the writer closed) or _RESET (an RST) after what was sent."""
        if self.broken:
            return
        loop = self.network.loop
        latency = self.network.latency_s(self.source, self.target)
        arrival = max(loop.time() + latency, self._last_arrival)
        self._last_arrival = arrival
        self._chunks.append((arrival, data))
        if self._timer is None:
            self._schedule(arrival)

    def _schedule(self, when: float) -> None:
        context = None if self.target is None else self.target.context
        self._timer = self.network.loop.call_at(when, self._deliver, context=context)

    def _deliver(self) -> None:
        self._timer = None
        if self.broken or not self._chunks:
            return
        target = self.target
        if target is not None and not self.network.reachable(self.source, target):
            self._schedule(self.network.loop.time() + RETRANSMIT_S)
            return
        # One chunk per callback, as a selector loop reads a socket once per iteration: what
        # the chunk woke runs before the next one (an EOF) arrives.
        _, data = self._chunks.popleft()
        loop = self.network.loop
        if data is _EOF or data is _RESET:
            self.broken = True
            self._chunks.clear()
            if data is _RESET:
                error = ConnectionResetError(104, "connection reset by peer")
                loop.call_soon(self.receiver.connection_lost, error, context=self._context())
            elif self.receiver.eof_received() is not True:
                loop.call_soon(self.receiver.connection_lost, None, context=self._context())
            return
        self.network.bytes_delivered += len(data)
        self.receiver.data_received(data)
        if self._chunks:
            self._schedule(max(self._chunks[0][0], loop.time()))

    def _context(self) -> contextvars.Context | None:
        return None if self.target is None else self.target.context


class SimTransport(asyncio.Transport):
    """One end of a simulated connection, as asyncio's socket transport behaves to a
    protocol: `write` never blocks (no flow control is simulated), `close` delivers what was
    written first, `abort` does not."""

    def __init__(
        self,
        connection: _Connection,
        outbound: _Pipe,
        inbound: _Pipe,
        protocol: asyncio.BaseProtocol,
    ) -> None:
        super().__init__()
        self._connection = connection
        self.outbound = outbound
        self.inbound = inbound
        self._protocol = protocol
        self._closing = False
        self.peer: tuple[str, int] | None = None  # the other end's address

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if data and not self._closing:
            self.outbound.push(bytes(data))

    def writelines(self, list_of_data: Any) -> None:
        self.write(b"".join(list_of_data))

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        self.outbound.push(_EOF)

    def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        self.outbound.push(_EOF)
        self.inbound.broken = True
        loop = self._connection.network.loop
        loop.call_soon(self._protocol.connection_lost, None)
        self._connection.network.forget(self._connection)

    def abort(self) -> None:
        if self._closing:
            return
        self._closing = True
        self.inbound.broken = True
        self.outbound.push(_RESET)
        loop = self._connection.network.loop
        loop.call_soon(self._protocol.connection_lost, None)
        self._connection.network.forget(self._connection)

    def drop(self) -> None:
        """The end's process is gone: nothing more is sent by it or delivered to it (what
        it sent before is still on its way)."""
        self._closing = True
        self.inbound.broken = True

    def is_closing(self) -> bool:
        return self._closing

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "peername" and self.peer is not None:
            return self.peer
        return default

    def get_write_buffer_size(self) -> int:
        return 0

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def is_reading(self) -> bool:
        return not self._closing

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._protocol = protocol

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._protocol
