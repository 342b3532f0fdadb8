"""`globelog bench ledger` flags: their definitions, their checks, and what they name.

Every bad flag is reported at once, as `--flag value: expected ...`, before anything starts.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import socket
import sys
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from benchmarks.adds import ENTRIES_MAX, SECONDS_MAX, AddWorkload
from benchmarks.jit import SETTLED_CORES, WARMUP_MAX_S_DEFAULT, warmup_max_problem
from core.errors import ClusterError, ConfigError
from core.topology import Replication, Topology
from core.topology_loader import load_topology
from ledger import DigestType
from localcluster import controller, processes
from localcluster.controller import Cluster
from localcluster.tools import REPO_ROOT, Tools
from region.process import event_loop

WINDOW_MAX = 10_000  # BenchThroughputLatency's default -throttle
LEDGERS_MAX = 256
ENTRY_BYTES_MAX = 1024 * 1024
WARMUP_ENTRIES_MAX = 100_000
PORT_PROBE_TIMEOUT_S = 0.5
DIGESTS = {"crc32": DigestType.CRC32, "crc32c": DigestType.CRC32C}


def add_cluster_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags every benchmark shares: which cluster it runs on."""
    parser.add_argument("--topology", default=None, help="topology file (default topology.yaml)")
    parser.add_argument(
        "--use-running",
        action="store_true",
        help="use the cluster already running from --data-dir instead of a temporary one",
    )
    parser.add_argument("--data-dir", default=os.environ.get("GLOBELOG_DATA_DIR"))
    parser.add_argument("--profile", default=None, help="WAN profile, e.g. ci|realistic")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_cluster_arguments(parser)
    parser.add_argument("--region", default="us-east", help="where the globelog client runs")
    parser.add_argument(
        "--replication", default=None, help="E/W/A/min_regions, e.g. 3/3/2/2 (default: topology's)"
    )
    parser.add_argument("--entry-bytes", type=int, default=1024)
    parser.add_argument("--window", type=int, default=256, help="adds outstanding at most")
    parser.add_argument(
        "--ledgers",
        type=int,
        default=64,
        help="ledgers written at once, a random one per add (the Java run's rate cap is "
        "ledgers x window adds/s)",
    )
    parser.add_argument("--seconds", type=int, default=20, help="measured time per run")
    parser.add_argument(
        "--entries",
        type=int,
        default=None,
        help="measured adds per run at most (the Java run stops sending there too, but "
        "still lasts --seconds)",
    )
    parser.add_argument("--warmup-entries", type=int, default=2000)
    parser.add_argument(
        "--warmup-max-seconds",
        type=float,
        default=WARMUP_MAX_S_DEFAULT,
        help="after the bookies' warm-up, unmeasured adds go on until the JVMs' JIT compilers "
        f"use under {SETTLED_CORES * 100:.0f}%% of a core, for at most this long; 0: no more",
    )
    parser.add_argument("--digest", choices=sorted(DIGESTS), default="crc32")
    parser.add_argument(
        "--bookie-tls",
        choices=("on", "off"),
        default="on",
        help="off: bookies and their clients in clear, to measure what TLS costs (a temporary "
        "cluster only; the proxies, not started here, would not follow)",
    )


@dataclass(frozen=True, slots=True)
class LedgerBenchOptions:
    cluster: Cluster
    workload: AddWorkload
    replication: Replication
    use_running: bool
    warmup_max_s: float


def _bounded(problems: list[str], flag: str, value: int | None, low: int, high: int) -> None:
    if value is not None and not low <= value <= high:
        problems.append(f"{flag} {value}: expected {low}..{high}")


def _replication(text: str | None, topology: Topology, problems: list[str]) -> Replication:
    if text is None:
        return topology.replication
    parts = text.split("/")
    if len(parts) != 4 or not all(p.isdigit() and int(p) > 0 for p in parts):
        problems.append(f"--replication {text!r}: expected E/W/A/min_regions, e.g. 3/3/2/2")
        return topology.replication
    e, w, a, m = (int(p) for p in parts)
    if not a <= w <= e:
        problems.append(f"--replication {text}: expected ack_quorum <= write_quorum <= ensemble")
    return Replication(e, w, a, m)


def bench_cluster(args: argparse.Namespace, problems: list[str]) -> Cluster:
    data_dir = Path(args.data_dir or REPO_ROOT / ".cluster").resolve()
    meta = processes.load_meta(data_dir) if args.use_running else {}
    path = Path(args.topology or meta.get("topology") or REPO_ROOT / "topology.yaml").resolve()
    topology = load_topology(path)
    profile = args.profile or meta.get("profile") or topology.emulated_wan.default_profile
    if args.use_running and args.profile and args.profile != meta.get("profile"):
        problems.append(
            f"--profile {args.profile}: the running cluster uses {meta.get('profile')!r}; "
            "change it with `globelog cluster up --profile`, or omit --profile"
        )
    elif profile not in topology.emulated_wan.profiles:
        problems.append(
            f"--profile {profile!r}: expected one of {sorted(topology.emulated_wan.profiles)}"
        )
    if args.region not in topology.region_names:
        problems.append(f"--region {args.region!r}: expected one of {list(topology.region_names)}")
    if getattr(args, "bookie_tls", "on") == "off":
        if args.use_running:
            problems.append("--bookie-tls off: only on a temporary cluster (no --use-running)")
        security = dataclasses.replace(topology.security, tls=False)
        topology = dataclasses.replace(topology, security=security)
    return Cluster(topology, path, data_dir, profile, lean_jvms=False)  # bookies timed as deployed


def parse_options(args: argparse.Namespace) -> LedgerBenchOptions:
    """The checked options, or ConfigError listing every problem."""
    problems: list[str] = []
    cluster = bench_cluster(args, problems)
    replication = _replication(args.replication, cluster.topology, problems)
    _bounded(problems, "--entry-bytes", args.entry_bytes, 1, ENTRY_BYTES_MAX)
    _bounded(problems, "--window", args.window, 1, WINDOW_MAX)
    _bounded(problems, "--ledgers", args.ledgers, 1, LEDGERS_MAX)
    _bounded(problems, "--seconds", args.seconds, 1, SECONDS_MAX)
    _bounded(problems, "--entries", args.entries, 1, ENTRIES_MAX)
    _bounded(problems, "--warmup-entries", args.warmup_entries, 0, WARMUP_ENTRIES_MAX)
    if (problem := warmup_max_problem(args.warmup_max_seconds)) is not None:
        problems.append(problem)
    if problems:
        raise ConfigError("bench ledger: " + "; ".join(problems))
    workload = AddWorkload(
        region=args.region,
        entry_bytes=args.entry_bytes,
        window=args.window,
        ledgers=args.ledgers,
        seconds=args.seconds,
        entries_max=args.entries,
        warmup_entries=args.warmup_entries,
        digest=DIGESTS[args.digest],
    )
    return LedgerBenchOptions(
        cluster, workload, replication, args.use_running, args.warmup_max_seconds
    )


def check_cluster_ports(cluster: Cluster, use_running: bool) -> None:
    """A running cluster must answer; a temporary one needs its ports free (they are fixed)."""
    topology = cluster.topology
    addresses = [n.client for n in topology.zookeeper] + [b.endpoint for b in topology.bookies]
    answering = [a.address for a in addresses if _answers(a.host, a.port)]
    if use_running and len(answering) < len(addresses):
        silent = sorted({a.address for a in addresses} - set(answering))
        raise ClusterError(
            f"--use-running: nothing answers at {', '.join(silent)}; start the cluster with "
            "`globelog cluster up` first"
        )
    if not use_running and answering:
        raise ClusterError(
            f"a temporary cluster needs ports in use by something else: {', '.join(answering)}; "
            "stop that cluster, or benchmark it with --use-running"
        )


def _answers(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=PORT_PROBE_TIMEOUT_S):
            return True
    except OSError:
        return False


def bench_progress(name: str) -> Callable[[str], None]:
    """Progress lines of `globelog bench NAME`, on stderr (the report goes to stdout)."""

    def progress(line: str) -> None:
        print(f"globelog bench {name}: {line}", file=sys.stderr, flush=True)

    return progress


def run_on_bench_cluster(
    cluster: Cluster,
    use_running: bool,
    tools: Tools,
    progress: Callable[[str], None],
    bench: Callable[[Cluster], Awaitable[str]],
) -> None:
    """Runs `bench` (see on_bench_cluster) on globelog's event loop and prints its report."""
    print(event_loop.run(on_bench_cluster(cluster, use_running, tools, progress, bench)))


async def on_bench_cluster(
    cluster: Cluster,
    use_running: bool,
    tools: Tools,
    progress: Callable[[str], None],
    bench: Callable[[Cluster], Awaitable[str]],
) -> str:
    """Runs `bench` on the running cluster, or on a temporary one brought up (with the
    proxies when `cluster.services`) and torn down around it."""
    if use_running:
        return await bench(cluster)
    with tempfile.TemporaryDirectory(prefix="globelog-bench-") as home:
        temporary = dataclasses.replace(cluster, data_dir=Path(home) / "data")
        try:
            with_proxies = " with proxies" if cluster.services else ""
            progress(f"cluster up{with_proxies}: temporary data dir {temporary.data_dir}")
            await controller.up(temporary, tools)
            return await bench(temporary)
        finally:
            controller.down(temporary, purge=True)
