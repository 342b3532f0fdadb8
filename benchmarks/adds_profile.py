"""One direct run of `globelog bench ledger` (its run 3) on a running cluster, to profile.

    globelog cluster --data-dir /tmp/gl-dev up
    .venv/bin/py-spy record -r 250 -o adds.svg -- .venv/bin/python \
        -m benchmarks.adds_profile --seconds 15

It prints the run's adds/s, client CPU (share of one core and µs per add) and latency. The
workload is the bench's default shape: E/W/A 3/3/2, 1 KiB entries, 256 adds outstanding
over 64 ledgers, CRC32, bookie ids dialled directly (no WAN proxy).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from benchmarks.adds import AddWorkload, run_adds
from core.topology import Replication
from core.topology_loader import load_topology
from global_meta import MetaStore
from ledger import DigestType
from region.process import event_loop


async def profile_run(topology_path: Path, seconds: int) -> str:
    topology = load_topology(topology_path)
    async with await MetaStore.of(topology, "us-east") as store:
        workload = AddWorkload("us-east", 1024, 256, 64, seconds, None, 2000, DigestType.CRC32)
        run = await run_adds(store, topology, workload, Replication(3, 3, 2, 2), direct=True)
    figures = run.figures
    rate = figures.adds / figures.elapsed_s
    cpu_us = run.client_cpu_pct / 100 * figures.elapsed_s / figures.adds * 1e6
    return (
        f"{rate:.0f} adds/s, client CPU {run.client_cpu_pct:.0f} % of a core "
        f"({cpu_us:.0f} µs per add), p50 {figures.median_ms:.1f} ms, p99 {figures.p99_ms:.1f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topology", type=Path, default=Path("topology.yaml"))
    parser.add_argument("--seconds", type=int, default=15)
    args = parser.parse_args()
    print(event_loop.run(profile_run(args.topology, args.seconds)))


if __name__ == "__main__":
    main()
