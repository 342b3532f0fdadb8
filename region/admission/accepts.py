"""New connections per client address, counted when the connection is accepted: before its
TLS handshake, the costliest thing a client can make a proxy do without a token.

Each address has a token bucket of `connections_per_s_per_address` a second holding at most
`connection_burst_per_address`; a connection past it is held unread for about a second
(0.5-1.5 s), then reset (no handshake: a millisecond or more of the proxy's one core saved;
and a client that reconnects at once is held, not accepted and reset as fast as it can
reconnect). Clients pool and keep
their connections alive, so a well-behaved one opens a few a minute; a flood of handshakes from
one address is refused without slowing anyone else. Behind a load balancer or a NAT every client
shares an address: raise the rate there, or turn it off with 0.

The table of addresses is bounded (`addresses_max`): past it the least recently seen address
is forgotten, which only gives it a full bucket again.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable

ADDRESSES_MAX = 65_536  # addresses tracked at once


class ConnectionRate:
    """Admits new connections per address; `per_s` 0 admits every one."""

    def __init__(
        self,
        per_s: float,
        burst: int,
        clock: Callable[[], float] = time.monotonic,
        addresses_max: int = ADDRESSES_MAX,
    ) -> None:
        if per_s < 0 or burst < 1:
            raise ValueError(f"per_s {per_s}, burst {burst}: expected per_s >= 0, burst >= 1")
        self.per_s = per_s
        self.burst = burst
        self._clock = clock
        self._addresses_max = addresses_max
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # tokens, at
        self.refused = 0  # connections refused, since the start

    def __len__(self) -> int:
        return len(self._buckets)

    def admit(self, address: str) -> bool:
        """Whether a new connection from `address` is let in (taking one of its tokens)."""
        if self.per_s == 0:
            return True
        now = self._clock()
        tokens, at = self._buckets.pop(address, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - at) * self.per_s)
        admitted = tokens >= 1
        self._buckets[address] = (tokens - 1 if admitted else tokens, now)  # the newest, last
        if len(self._buckets) > self._addresses_max:
            self._buckets.popitem(last=False)
        if not admitted:
            self.refused += 1
        return admitted
