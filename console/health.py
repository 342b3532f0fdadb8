"""Every node of a deployment, up or down: what `globelog status` prints and the console's
overview shows. Each probe has a bound; a node that does not answer within it is down."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Collection

import aiohttp

from core.errors import MetadataUnavailableError
from core.security.credentials import bookie_tls, client_ssl, default_token
from core.topology import Topology, ZkNode
from global_meta import MetaStore
from ledger import BookiePinger, BookieUnreachableError, UnderReplication
from localcluster.metadata import registered_bookies
from localcluster.probes import (
    DEGRADED,
    probe_session,
    service_health,
    zookeeper_mode,
    zookeeper_tls,
)
from rebuild.service import read_rebuilders

STATUS_PING_TIMEOUT_S = 2.0
STATUS_SESSION_TIMEOUT_S = 5.0
REBUILDER_SILENT_MIN_S = 5.0
ZOOKEEPER_MODES_KEPT_S = 3.0  # `srvr` closes its connection: a fresh handshake each time
ZOOKEEPER_MODE_FRESH_S = 0.5  # an answer this young is not asked again, suspect or not

Row = dict[str, str]


class NodeProbes:
    """How `deployment_status` reaches the nodes, kept from one call to the next by a caller
    that asks every second (the console): bookie pings and proxies' health over kept
    connections, ZooKeeper's modes asked every ZOOKEEPER_MODES_KEPT_S, and at once for a
    node whose region has another node not answering (a region going down shows as down in
    the same round). On a secure deployment each fresh connection is a TLS handshake on
    both ends; probing afresh made the console's rounds some 30 handshakes a second, a tenth
    of a core on the bookies, ZooKeeper and itself together (docs/console.md)."""

    def __init__(self, topology: Topology, clock: Callable[[], float] = time.monotonic) -> None:
        self._topology = topology
        self._clock = clock
        # both made at first use: the HTTP session in the event loop, and the CA's files
        # read when a probe needs them (a console is made before `security init` runs)
        self._bookies: BookiePinger | None = None
        self._http: aiohttp.ClientSession | None = None
        self._modes: dict[str, tuple[str | None, float]] = {}  # node: (mode, asked at)

    async def zookeeper_modes(self, suspect_regions: Collection[str] = ()) -> list[str | None]:
        """Each ZooKeeper node's mode (None: not serving), in the topology's order: asked
        when the last answer is ZOOKEEPER_MODES_KEPT_S old, or ZOOKEEPER_MODE_FRESH_S old for
        a node of `suspect_regions`."""
        now = self._clock()

        def due(node: ZkNode) -> bool:
            _, at = self._modes.get(node.name, (None, -math.inf))
            keep = (
                ZOOKEEPER_MODE_FRESH_S if node.region in suspect_regions else ZOOKEEPER_MODES_KEPT_S
            )
            return now - at >= keep

        asked = [n for n in self._topology.zookeeper if due(n)]
        tls = zookeeper_tls(self._topology.security)
        answers = await asyncio.gather(*(zookeeper_mode(n.client, tls) for n in asked))
        for node, mode in zip(asked, answers, strict=True):
            self._modes[node.name] = (mode, now)
        return [self._modes[n.name][0] for n in self._topology.zookeeper]

    @property
    def bookies(self) -> BookiePinger:
        if self._bookies is None:
            self._bookies = BookiePinger(bookie_tls(self._topology.security))
        return self._bookies

    @property
    def http(self) -> aiohttp.ClientSession:
        if self._http is None:
            self._http = probe_session(client_ssl(self._topology.security))
        return self._http

    async def close(self) -> None:
        bookies, http = self._bookies, self._http
        self._bookies, self._http = None, None
        try:
            if bookies is not None:
                await bookies.close()
        finally:
            if http is not None:
                await http.close()


async def deployment_status(
    topology: Topology,
    store: MetaStore | None = None,
    token: str | None = None,
    probes: NodeProbes | None = None,
) -> list[Row]:
    """One row per node of the topology: kind, name, region, address, state, detail. With
    `store`, registrations are read through it (else through a session of its own); proxies
    are asked for their health with `token` (default: this host's, `default_token`); nodes
    are reached through `probes` (else through probes made for this call)."""
    if probes is None:
        made = NodeProbes(topology)
        try:
            return await deployment_status(topology, store, token, made)
        finally:
            await made.close()
    # a rebuilder reports every report_interval_s: three missed reports and it is down
    silent = max(REBUILDER_SILENT_MIN_S, 3 * topology.rebuild.report_interval_s)
    modes = await probes.zookeeper_modes()
    rows: list[Row] = []
    writable: set[str] | None = None
    read_only: set[str] = set()
    rebuild_rows: list[Row] = []
    if any(modes):  # with no server serving, a session could only time out
        try:
            if store is not None:
                writable, read_only, rebuild_rows = await _registrations(store, silent)
            else:
                async with await MetaStore.of(
                    topology, connect_timeout_s=STATUS_SESSION_TIMEOUT_S
                ) as own:
                    writable, read_only, rebuild_rows = await _registrations(own, silent)
        except MetadataUnavailableError:
            pass
    pings = await asyncio.gather(*(_ping(probes.bookies, b.bookie_id) for b in topology.bookies))
    for bookie, answer in zip(topology.bookies, pings, strict=True):
        # A killed bookie stays registered until its ZooKeeper session expires: ask it too.
        if writable is None:
            registered = "registration unknown (no ZooKeeper session)"
        elif bookie.bookie_id in writable:
            registered = "registered writable"
        elif bookie.bookie_id in read_only:
            registered = "registered read-only"
        else:
            registered = "not registered"
        ok = answer is not None and registered == "registered writable"
        said = f"answers in {answer * 1000:.1f} ms" if answer is not None else "no answer"
        rows.append(
            row("bookie", bookie.name, bookie.region, bookie.bookie_id, ok, f"{registered}, {said}")
        )
    proxies = [
        (kind, proxy)
        for region in topology.regions
        for kind, listed in (
            ("write-proxy", region.write_proxies),
            ("read-proxy", region.read_proxies),
        )
        for proxy in listed
    ]
    if token is None:
        token = default_token(topology.security)
    tls = client_ssl(topology.security)
    answers = await asyncio.gather(
        *(service_health(topology.proxy_url(p), token, tls, probes.http) for _, p in proxies)
    )
    rows += [
        row(kind, p.name, p.region, p.endpoint.address, ok, detail)
        for (kind, p), (ok, detail) in zip(proxies, answers, strict=True)
    ]
    # a region with a node down may be going down whole: its ZooKeeper node asked afresh
    suspects = {r["region"] for r in rows + rebuild_rows if r["state"] != "up"}
    modes = await probes.zookeeper_modes(suspects)
    zookeeper_rows = [
        row(
            "zookeeper", n.name, n.region, n.client.address, mode is not None, mode or "not serving"
        )
        for n, mode in zip(topology.zookeeper, modes, strict=True)
    ]
    return zookeeper_rows + rows + rebuild_rows


async def _registrations(
    store: MetaStore, silent_after_s: float
) -> tuple[set[str], set[str], list[Row]]:
    writable, read_only = await registered_bookies(store)
    return writable, read_only, await _rebuild_rows(store, silent_after_s)


async def _rebuild_rows(store: MetaStore, silent_after_s: float) -> list[Row]:
    """Each rebuilder whose status node exists; down once it has not reported for
    `silent_after_s` (its node stays until its session expires)."""
    rows = []
    now_ms = time.time() * 1000
    for r in await read_rebuilders(store):
        age_s = (now_ms - r.get("published_ms", now_ms)) / 1000
        detail = (
            f"{'auditor; ' if r.get('auditor') else ''}{r.get('ledgers_rebuilt', 0)} ledgers "
            f"rebuilt, {r.get('bytes_per_s', 0) / 1e6:.1f} MB/s, in progress "
            f"{len(r.get('in_progress', []))}"
        )
        ok = age_s <= silent_after_s
        if not ok:
            detail = f"silent for {age_s:.0f} s; last said: {detail}"
        rows.append(row("rebuilder", str(r.get("name")), str(r.get("region")), "-", ok, detail))
    return rows


async def under_replicated(topology: Topology) -> int | None:
    """How many ledgers are marked under-replicated; None without ZooKeeper."""
    try:
        async with await MetaStore.of(
            topology, connect_timeout_s=STATUS_SESSION_TIMEOUT_S
        ) as store:
            return len(await UnderReplication(store).marked())
    except MetadataUnavailableError:
        return None


def row(kind: str, name: str, region: str, address: str, ok: bool, detail: str) -> Row:
    # a proxy that answers with followers not following is degraded: neither up nor down
    state = "up" if ok else DEGRADED if detail.startswith(DEGRADED) else "down"
    return {
        "kind": kind, "name": name, "region": region, "address": address,
        "state": state, "detail": detail,
    }  # fmt: skip


async def _ping(pinger: BookiePinger, address: str) -> float | None:
    try:
        return await pinger.ping(address, STATUS_PING_TIMEOUT_S)
    except BookieUnreachableError:
        return None
