"""Quotas: what one client may take of one proxy each second, per namespace.

A client is its token's subject (security on, the default), else its address. Each (client, namespace, kind) has two token
buckets, requests and bytes, each holding at most one second of its rate (core/settings/limits.py
`Quota`; per-namespace overrides in topology.yaml). A request is let in while its buckets are
not in debt, and then takes what it uses, into debt if need be: a request bigger than a
second's worth of bytes passes once, and the client's next one waits until the debt is paid
(the way Kafka throttles after the fact). Bytes of a read are known once its page is built,
so they are taken then. A refused request is answered 429 quota_exceeded with Retry-After:
the seconds until its buckets let it in, counted from the answer, which comes about
REFUSAL_HOLD_S after the request, longer for a client with many refusals held (RefusalHolds:
a client that ignores Retry-After cannot make the proxy spend its core on refusals).

The buckets are a bounded table (`buckets_max`). A bucket that has refilled is the same as
none, so those go first when it is full; when every one is still in use, a new client is
refused until one has refilled (retry after a second).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.typedefs import Middleware

from core import runtime
from core.errors import QuotaExceededError
from core.settings.limits import ProxyLimits, Quota
from core.streams import check_name
from region.observability.telemetry import PROXY_METRICS
from region.security.gate import TOKEN

BUCKETS_MAX = 100_000  # (client, namespace, kind) triples tracked at once
PRUNE_PAUSE_S = 1.0  # after a prune that freed little, the next waits this long
REFUSAL_HOLD_S = 1.0  # a refused request is answered about this long after it
HOLD_SPREAD = 0.5  # each hold is REFUSAL_HOLD_S times 1 +- this, at random
HOLD_MAX_S = 10.0  # the longest a refusal is held, however many its client has held
HOLDS_MAX = 10_000  # refusals one proxy holds at once; past it, answered at once


def refusal_hold_s(rng: random.Random) -> float:
    """How long to hold one refusal: REFUSAL_HOLD_S spread by HOLD_SPREAD either way. Held for
    one fixed time, the refusals of a client that sends again the moment it is answered come
    back all in the same turn of the loop, second after second (hundreds of answers, tens of
    milliseconds in which nobody else is served); spread, they come a few at a time. `rng`
    from `runtime.new_rng()`, so that a simulation's seed replays the same holds."""
    return REFUSAL_HOLD_S * rng.uniform(1 - HOLD_SPREAD, 1 + HOLD_SPREAD)


class RefusalHolds:
    """The refusals one proxy is holding, counted per client, so that a client is answered
    about `per_s` refusals a second however many connections it sends them on. Each refusal
    is held `refusal_hold_s()` times the client's refusals held at that moment over `per_s`
    (at least once, at most HOLD_MAX_S): a client that sends again the moment it is refused,
    on N connections, gets N refusals every N / per_s seconds. A fixed hold would answer it N
    a second, and an attacker's connections (50 more a second from each of its addresses)
    would buy it refusals the proxy pays a request's CPU for each. A hold goes on when its
    client closes the connection (its handler is not cancelled), so at most HOLDS_MAX are held
    at once, over every client; past that a refusal is answered at once. The table holds only
    clients with a refusal held."""

    def __init__(self, per_s: float) -> None:
        self.per_s = per_s
        self._held: dict[str, int] = {}
        self._total = 0
        self._rng: random.Random | None = None  # made on the loop (the simulation's seed)

    def __len__(self) -> int:
        return len(self._held)

    @property
    def total(self) -> int:
        return self._total

    async def hold(self, client: str) -> float:
        """Waits out one refusal of `client`'s; returns how long it was held."""
        if self._total >= HOLDS_MAX:
            return 0.0
        if self._rng is None:
            self._rng = runtime.new_rng()
        count = self._held.get(client, 0) + 1
        self._held[client] = count
        self._total += 1
        stretch = count / (self.per_s * REFUSAL_HOLD_S) if self.per_s > 0 else 1.0
        held_s = min(HOLD_MAX_S, refusal_hold_s(self._rng) * max(1.0, stretch))
        try:
            await asyncio.sleep(held_s)
        finally:
            self._total -= 1
            count_down(self._held, client)
        return held_s


def count_down(counts: dict[str, int], key: str) -> None:
    """One fewer of `key` in a table of counts that holds only keys with some left."""
    left = counts[key] - 1
    if left:
        counts[key] = left
    else:
        del counts[key]


class _Buckets:
    __slots__ = ("at", "bytes", "quota", "requests")

    def __init__(self, quota: Quota, kind: str, now: float) -> None:
        self.quota = quota
        self.requests = quota.most(kind, "requests") or 0.0
        self.bytes = quota.most(kind, "bytes") or 0.0
        self.at = now

    def refill(self, kind: str, now: float) -> None:
        elapsed = now - self.at
        self.at = now
        quota = self.quota
        if (rate := quota.rate(kind, "requests")) is not None:
            self.requests = min(quota.most(kind, "requests") or 0.0, self.requests + rate * elapsed)
        if (rate := quota.rate(kind, "bytes")) is not None:
            self.bytes = min(quota.most(kind, "bytes") or 0.0, self.bytes + rate * elapsed)

    def full(self, kind: str) -> bool:
        requests, size = self.quota.most(kind, "requests"), self.quota.most(kind, "bytes")
        return (requests is None or self.requests >= requests) and (
            size is None or self.bytes >= size
        )

    def wait_s(self, kind: str) -> tuple[float, str]:
        """Seconds until a request is let in (0: now), and the unit that holds it back."""
        waits = [(0.0, "")]
        if (rate := self.quota.rate(kind, "requests")) is not None and self.requests < 1:
            waits.append(((1 - self.requests) / rate, "requests"))
        if (rate := self.quota.rate(kind, "bytes")) is not None and self.bytes < 0:
            waits.append((-self.bytes / rate, "bytes"))
        return max(waits)


class Quotas:
    """One proxy's quota table; `kind` is "append" (write proxy) or "read" (read proxy)."""

    def __init__(
        self,
        limits: ProxyLimits,
        kind: str,
        clock: Callable[[], float] = time.monotonic,
        buckets_max: int = BUCKETS_MAX,
    ) -> None:
        self.limits = limits
        self.kind = kind
        self._clock = clock
        self._buckets_max = buckets_max
        self._table: dict[tuple[str, str], _Buckets] = {}
        self._prune_after = 0.0
        self.holds = RefusalHolds(limits.refusals_per_s_per_client)

    def __len__(self) -> int:
        return len(self._table)

    def admit(self, client: str, namespace: str, size: int = 0) -> None:
        """Lets one request of `client` in `namespace` in, taking one request and `size`
        bytes, or raises QuotaExceededError."""
        buckets = self._buckets(client, namespace)
        wait_s, unit = buckets.wait_s(self.kind)
        if wait_s > 0:
            PROXY_METRICS.quota_refused.add(1, {"kind": self.kind, "unit": unit})
            rate = buckets.quota.rate(self.kind, unit)
            raise QuotaExceededError(
                f"client {client} used its {self.kind} quota in namespace {namespace!r} "
                f"({rate:g} {unit}/s); retry in {wait_s:.2f} s",
                wait_s,
            )
        buckets.requests -= 1
        PROXY_METRICS.quota_used.add(1, {"kind": self.kind, "unit": "requests"})
        self.take_bytes(client, namespace, size)

    def take_requests(self, client: str, namespace: str, count: int) -> None:
        """Takes `count` more requests of the client's quota (into debt if need be): what an
        expensive request costs beyond the one it was let in with."""
        if count <= 0:
            return
        self._buckets(client, namespace).requests -= count
        PROXY_METRICS.quota_used.add(count, {"kind": self.kind, "unit": "requests"})

    def take_bytes(self, client: str, namespace: str, size: int) -> None:
        """Takes `size` bytes of the client's quota (into debt if need be)."""
        if size <= 0:
            return
        buckets = self._buckets(client, namespace)
        buckets.bytes -= size
        PROXY_METRICS.quota_used.add(size, {"kind": self.kind, "unit": "bytes"})

    def wait_s(self, client: str, namespace: str) -> float:
        """Seconds until the client's next request is let in (0: now)."""
        return self._buckets(client, namespace).wait_s(self.kind)[0]

    def _buckets(self, client: str, namespace: str) -> _Buckets:
        key = (client, namespace)
        now = self._clock()
        buckets = self._table.get(key)
        if buckets is not None:
            buckets.refill(self.kind, now)
            return buckets
        if len(self._table) >= self._buckets_max:
            self._prune(now)
        if len(self._table) >= self._buckets_max:
            raise QuotaExceededError(
                f"this proxy tracks the quotas of {len(self._table)} clients and namespaces, "
                "its most, all active in the last second; retry later",
                PRUNE_PAUSE_S,
            )
        buckets = self._table[key] = _Buckets(self.limits.quota_for(namespace), self.kind, now)
        return buckets

    def _prune(self, now: float) -> None:
        """Drops the buckets that have refilled (at most once a second when that frees
        little, so a table full of active clients does not cost a scan per request)."""
        if now < self._prune_after:
            return
        before = len(self._table)
        for key, buckets in list(self._table.items()):
            buckets.refill(self.kind, now)
            if buckets.full(self.kind):
                del self._table[key]
        if len(self._table) > before * 0.9:
            self._prune_after = now + PRUNE_PAUSE_S


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def quota_middleware(quotas: Quotas, sized: Callable[[web.Request], bool]) -> Middleware:
    """Admits each request of a namespace through `quotas`, taking its Content-Length when
    `sized(request)` (appends; a body without one is taken once read)."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        namespace = request.match_info.get("ns")
        if namespace is not None:
            check_name(namespace, "namespace")
            size = (request.content_length or 0) if sized(request) else 0
            client = client_of(request)
            try:
                quotas.admit(client, namespace, size)
            except QuotaExceededError as refused:
                await hold_refusal(refused, quotas.holds, client)
                raise
        return await handler(request)

    return middleware


async def hold_refusal(refused: QuotaExceededError, holds: RefusalHolds, client: str) -> None:
    """Answers a refusal only once `holds` has held it (about REFUSAL_HOLD_S, longer for a
    client with many held), its Retry-After then what is left of its wait. A request-rate
    quota's wait is short (a hundredth of a second at 100/s), so a client that sends again at
    once, ignoring Retry-After, would otherwise cost the proxy's core a refusal as fast as it
    can send (a sleep costs no CPU; the connection it holds counts against
    `connections_max`). A client within its quota is never held."""
    held_s = await holds.hold(client)
    refused.retry_after_s = max(0.0, refused.retry_after_s - held_s)


def client_of(request: web.Request) -> str:
    """Who a request counts against: its token's subject when tokens are on (every client of
    one subject shares its quota, wherever they connect from, and clients behind one address
    do not share theirs), else its peer address."""
    token = request.get(TOKEN)
    if token is not None:
        return f"subject {token.subject}"
    return request.remote or "unknown"
