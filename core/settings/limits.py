"""Every bound a proxy keeps on what clients can make it hold, and the quotas it enforces.

One frozen value per proxy, built from topology.yaml's optional `limits:` section over the
defaults below (core/settings/limits_loader.py). docs/http-api.md's "Limits" table lists each one with
its default and the answer a client gets past it; a test holds the two to each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Quota:
    """What one client (its token's subject, or its address with tokens off; per namespace)
    may take of one proxy each second; None
    is no limit. A request past it is answered 429 quota_exceeded with Retry-After."""

    append_bytes_per_s: float | None = 64 * MIB
    append_requests_per_s: float | None = 5_000
    read_bytes_per_s: float | None = 256 * MIB
    read_requests_per_s: float | None = 5_000
    # seconds' worth of each rate a budget holds: what a client that was quiet may spend at
    # once before it is held to the rate
    burst_s: float = 1.0

    def rate(self, kind: str, unit: str) -> float | None:
        """The rate of `kind` (append | read) in `unit` (bytes | requests)."""
        value: float | None = getattr(self, f"{kind}_{unit}_per_s")
        return value

    def most(self, kind: str, unit: str) -> float | None:
        """What a budget of `kind` in `unit` holds when full (None: no limit); a budget of
        requests holds at least one, or none would ever be let in."""
        rate = self.rate(kind, unit)
        if rate is None:
            return None
        return max(1.0, rate * self.burst_s) if unit == "requests" else rate * self.burst_s


@dataclass(frozen=True, slots=True)
class ProxyLimits:
    # connections (both proxies)
    connections_max: int = 10_000  # open at once; past it a new one is answered 503 and closed
    # new connections an address may open a second (0: any), at most this many at once: a
    # connection past them is reset before its TLS handshake (region/admission/accepts.py)
    connections_per_s_per_address: float = 50.0
    connection_burst_per_address: int = 250
    idle_timeout_s: float = 30.0  # a request's headers are due within it, and idle keep-alive
    body_timeout_s: float = 30.0  # a request's body is due within it once its headers came
    # a client takes what the proxy sends it (each slice of a page, each line of a tail)
    # within it, or its connection is closed
    send_timeout_s: float = 30.0
    request_bytes_max: int = 64 * MIB  # one request's body (a bulk batch)
    # write proxy
    stream_inflight_bytes_max: int = 128 * MIB  # accepted, not yet acknowledged, per stream
    proxy_inflight_bytes_max: int = 512 * MIB  # the same over every stream
    owned_streams_max: int = 10_000  # streams one write proxy owns at once
    stream_idle_release_s: float = 600.0  # an owned stream not written this long is released
    producer_acks_max: int = 500_000  # idempotent writes remembered over every stream (~300 B)
    # a request that makes the proxy take a stream (its lock, the last segment's recovery, a
    # new ledger, the producer table) costs this many requests of its client's append quota
    stream_open_cost: int = 20
    # read proxy
    page_records_max: int = 10_000
    page_bytes_max: int = 4 * MIB  # a page's payloads (at least one record, whatever its size)
    reads_max: int = 10_000  # pages served at once, long polls included
    tails_max: int = 1_000  # streamed tails open at once
    # the same for one client (its token's subject, or its address with tokens off): one
    # client's long polls or tails cannot take every slot from the others
    reads_per_client_max: int = 1_000
    tails_per_client_max: int = 100
    # bytes of answers (pages, a tail's lines) a read proxy holds built until their clients
    # take them, in all and of one client: a client that reads slowly or not at all holds at
    # most its share (or one page) for up to send_timeout_s, not its quota's worth
    send_bytes_max: int = 256 * MIB
    client_send_bytes_max: int = 32 * MIB
    # refusals (429) one client is answered a second, however many connections it sends on:
    # past it each is held longer than REFUSAL_HOLD_S (region/admission/quotas.py)
    refusals_per_s_per_client: float = 50.0
    wait_ms_max: int = 30_000  # a long poll's wait
    # a streamed tail with nothing to send sends a blank line this often, so that a client or
    # a load balancer with a read deadline sees it alive
    tail_keepalive_s: float = 15.0
    cache_streams_max: int = 1_000  # streams with a read-ahead (the least recently read go)
    cache_stream_bytes_max: int = 64 * MIB  # one stream's read-ahead
    cache_bytes_max: int = 1024 * MIB  # every read-ahead together
    cache_idle_s: float = 300.0  # a read-ahead no one read this long is closed
    # ... and one no one read this long stops following its stream, keeping its records: the
    # next read resumes it after the newest (an idle stream's follower polls its bookies)
    cache_follow_idle_s: float = 30.0
    # read-aheads following at once: past it, the least recently read of those no request
    # read in the last second pause first (each idle one polls its bookies every few seconds)
    cache_following_max: int = 200
    # a request that opens a reader (a read-ahead, a page from before it, a position's
    # lookup) costs this many requests of its client's read quota: a reader is a ZooKeeper
    # walk and bookie round trips, a page from the read-ahead a lookup in memory
    reader_open_cost: int = 10
    # quotas, per client and namespace
    quota: Quota = field(default_factory=Quota)
    namespace_quotas: tuple[tuple[str, Quota], ...] = ()

    def quota_for(self, namespace: str) -> Quota:
        for name, quota in self.namespace_quotas:
            if name == namespace:
                return quota
        return self.quota


def limit_names() -> list[str]:
    """The names of the scalar limits (topology.yaml keys and docs table rows)."""
    return [f.name for f in fields(ProxyLimits) if f.name not in ("quota", "namespace_quotas")]


def quota_names() -> list[str]:
    return [f.name for f in fields(Quota)]


def shown(name: str, value: float) -> str:
    """A limit's value as docs/http-api.md's table shows it (64 MiB, 30 s, 10 000)."""
    if name.endswith("_bytes_max") or name.endswith("_bytes_per_s"):
        return f"{int(value) // MIB} MiB"
    if name.endswith("_s") and not name.endswith("_per_s"):
        return f"{value:g} s"
    text = f"{int(value):,}".replace(",", " ")
    return f"{text} ms" if name.endswith("_ms_max") else text
