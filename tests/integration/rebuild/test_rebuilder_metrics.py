"""A rebuilder process (`globelog serve rebuilder --metrics-address`) as an operator scrapes
it: its instruments at /metrics, its status at /v1/health, and a clean stop on SIGTERM."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import aiohttp

from core.children import Child
from localcluster.controller import Cluster
from localcluster.probes import wait_until
from tests.support.security import client_session
from tests.support.topologies import free_ports

INSTRUMENTS = (
    "globelog_rebuild_bytes_copied_bytes_total",
    "globelog_rebuild_entries_copied_total",
    "globelog_rebuild_fragments_rebuilt_total",
    "globelog_rebuild_ledgers_rebuilt_total",
    "globelog_rebuild_ledgers_failed_total",
    "globelog_rebuild_ledgers_deferred_total",
    "globelog_rebuild_ledgers_closed_total",
    "globelog_rebuild_ledgers_in_progress",
    "globelog_rebuild_copy_rate_bytes_per_second",
    "globelog_rebuild_auditor_leading",
    "globelog_rebuild_lost_bookies",
    "globelog_rebuild_under_replicated_ledgers",
    "globelog_rebuild_under_replicated_bytes",
    "globelog_rebuild_last_recovery_seconds",
)


async def test_a_rebuilder_serves_its_gauges_and_its_status(
    cluster: Cluster, tmp_path: Path
) -> None:
    [port] = free_ports(1)
    name = f"metrics-rebuilder-{port}"
    log = (tmp_path / "rebuilder.log").open("wb")
    process = Child(
        (sys.executable, "-m", "cli.main", "serve", "rebuilder", "--region", "eu-west",
        "--name", name, "--topology", str(cluster.topology_path),
        "--metrics-address", f"127.0.0.1:{port}"),
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    base = f"https://127.0.0.1:{port}"  # the rebuilder serves TLS as the proxies do
    try:
        async with client_session({}, timeout=aiohttp.ClientTimeout(total=5)) as anonymous:
            await wait_until("the rebuilder serving", lambda: _answers(anonymous, base), 60)
            async with anonymous.get(f"{base}/metrics") as response:
                assert response.status == 401, "its instruments need an observe token"
        async with client_session(timeout=aiohttp.ClientTimeout(total=5)) as http:

            async def published() -> bool:
                try:
                    async with http.get(f"{base}/v1/health") as response:
                        found = await response.json()
                    return "bytes_copied" in found and all(
                        f["state"] == "running" for f in found["followers"]
                    )
                except aiohttp.ClientError:
                    return False

            await wait_until("the rebuilder's status served", published, 60)
            async with http.get(f"{base}/v1/health") as response:
                status = await response.json()
            assert status["name"] == name and status["region"] == "eu-west"
            assert status["pace_shares"] == 1, "nobody else copying: the whole shared pace"
            async with http.get(f"{base}/metrics") as response:
                assert response.status == 200
                text = await response.text()
        lines = [line for line in text.splitlines() if line.startswith("globelog_rebuild_")]
        for instrument in INSTRUMENTS:
            mine = [line for line in lines if line.startswith(instrument + "{")]
            assert any(f'rebuilder="{name}"' in line for line in mine), (instrument, lines)
            assert all(float(line.rsplit(" ", 1)[1]) >= 0 for line in mine)
    finally:
        process.terminate()
        try:
            code = await process.wait(30)
        finally:
            process.kill()  # (when it did not end in time)
        log.close()
    assert code == 0, (tmp_path / "rebuilder.log").read_text()[-2000:]
    assert json.dumps(status)  # (the status is plain JSON)


async def _answers(http: aiohttp.ClientSession, base: str) -> bool:
    try:
        async with http.get(f"{base}/v1/health"):
            return True
    except aiohttp.ClientError:
        return False
