"""Whether a cluster's ZooKeeper answers before a command waits for a session, and what the
CLI tells a user whose cluster does not: how to start it, how to check it, what was tried."""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path

from core.errors import MetadataUnavailableError
from core.topology import Topology

# A listening ZooKeeper server accepts a TCP connection within milliseconds on a LAN, and a
# port nothing listens on refuses at once; this bound only matters for a host that drops
# packets. With no server accepting, a command fails after this instead of waiting out the
# session's connect timeout (15 s) while kazoo retries.
ZK_PROBE_TIMEOUT_S = 2.0


def _host_port(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


async def _refusal(address: str, timeout_s: float) -> str | None:
    """None when `address` accepts a TCP connection, else why not."""
    try:
        async with asyncio.timeout(timeout_s):
            _, writer = await asyncio.open_connection(*_host_port(address))
    except TimeoutError:
        return f"no answer in {timeout_s:g} s"
    except OSError as err:  # asyncio words it "Connect call failed (...)": say why instead
        return os.strerror(err.errno).lower() if err.errno else str(err)
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return None


async def require_zookeeper(topology: Topology, timeout_s: float = ZK_PROBE_TIMEOUT_S) -> None:
    """Raises MetadataUnavailableError at once when no ZooKeeper server of `topology` accepts
    a connection. One that accepts is left to the session's own connect and its timeout."""
    addresses = [node.client.address for node in topology.zookeeper]
    refusals = await asyncio.gather(*(_refusal(a, timeout_s) for a in addresses))
    if all(refusal is not None for refusal in refusals):
        if len(set(refusals)) == 1:
            tried = f"{', '.join(addresses)} ({refusals[0]})"
        else:
            tried = ", ".join(f"{a} ({r})" for a, r in zip(addresses, refusals, strict=True))
        raise MetadataUnavailableError(f"no ZooKeeper server answers at {tried}")


def advice(topology_path: Path, default_path: Path) -> str:
    """What to do when the cluster of `topology_path` cannot be reached."""
    named = "" if topology_path == default_path else f" --topology {topology_path}"
    return "\n".join(
        (
            f"globelog: is the cluster of {topology_path} running?",
            f"  start it:   globelog cluster{named} up   (a local cluster; `make demo` shows one at"
            " work)",
            f"  check it:   globelog status{named}   (every node of the topology, up or down)",
            "  another cluster: --topology FILE or GLOBELOG_TOPOLOGY=FILE; "
            "the libraries' logs: globelog -v ...",
        )
    )
