"""Runs BookKeeper's own Java benchmark, BenchThroughputLatency, against the cluster's bookies.

It connects with `-zookeeper` (it predates metadata service URIs; the ledgers root is the
default /ledgers, as ours) and dials bookies by their registered ids, so it never goes
through the emulated WAN. Its `-throttle T` is two limits at once: at most T adds
outstanding (its semaphore) and at most T adds/s per ledger handle (the client's
`throttle` setting is a rate limiter in LedgerHandle), so with L ledgers it can never
exceed L * T adds/s; the report flags a run that got close to that cap.
"""

from __future__ import annotations

import resource
import subprocess
from dataclasses import dataclass
from pathlib import Path

from benchmarks.figures import AddFigures, JavaBenchOutput, parse_java_output, parse_latency_dump
from benchmarks.figures import summarise as summarise_figures
from core.children import Child, ChildTimeoutError
from core.errors import ClusterError
from localcluster.probes import log_tail
from localcluster.tools import Tools

JAVA_BENCH_CLASS = "org.apache.bookkeeper.benchmark.BenchThroughputLatency"
JAVA_HEAP = "-Xmx512m"
# Beyond -time: JVM start, ZooKeeper session, ledger creation and its 10000-add warm-up.
JAVA_OVERHEAD_TIMEOUT_S = 180.0
# It allocates long[sendlimit] for the latencies (32 MB here); no run here sends more.
SEND_LIMIT_DEFAULT = 4_000_000
RATE_CAP_NEAR = 0.9  # a throughput at >= 90 % of its rate cap is the cap, not the bookies
# Its warm-up adds 10000 entries under the same rate cap; past this it is skipped.
JAVA_WARMUP_ADDS = 10_000
JAVA_WARMUP_SECONDS_MAX = 60


@dataclass(frozen=True, slots=True)
class JavaBenchRequest:
    ensemble_size: int
    write_quorum: int
    ack_quorum: int
    entry_bytes: int
    throttle: int  # max outstanding adds, and max adds/s per ledger handle
    ledgers: int
    seconds: int
    send_limit: int = SEND_LIMIT_DEFAULT

    @property
    def rate_cap_per_s(self) -> int:
        return self.throttle * self.ledgers

    @property
    def skip_warmup(self) -> bool:
        return self.rate_cap_per_s * JAVA_WARMUP_SECONDS_MAX < JAVA_WARMUP_ADDS


@dataclass(frozen=True, slots=True)
class JavaRun:
    output: JavaBenchOutput
    figures: AddFigures  # recomputed from its latency dump with the same percentiles as ours
    request: JavaBenchRequest
    log: Path
    cpu_s: float  # user + system CPU of the JVM, start-up and warm-up included

    @property
    def capped(self) -> bool:
        return self.figures.adds_per_s >= RATE_CAP_NEAR * self.request.rate_cap_per_s


def java_bench_argv(
    tools: Tools,
    zk_connect: str,
    jvm_flags: tuple[str, ...],
    request: JavaBenchRequest,
    latency_file: Path,
) -> tuple[str, ...]:
    """The benchmark's command line; `jvm_flags` log it in to ZooKeeper and configure its
    TLS to the bookies (localcluster.nodes.java_client_flags)."""
    return (
        tools.java,
        JAVA_HEAP,
        *jvm_flags,
        "-cp",
        tools.bookkeeper_classpath,
        JAVA_BENCH_CLASS,
        "-zookeeper",
        zk_connect,
        "-ensemble",
        str(request.ensemble_size),
        "-quorum",
        str(request.write_quorum),
        "-ackQuorum",
        str(request.ack_quorum),
        "-entrysize",
        str(request.entry_bytes),
        "-throttle",
        str(request.throttle),
        "-ledgers",
        str(request.ledgers),
        "-time",
        str(request.seconds),
        "-sendlimit",
        str(request.send_limit),
        "-latencyFile",
        str(latency_file),
        *(("-skipwarmup",) if request.skip_warmup else ()),
    )


async def run_java_bench(
    tools: Tools,
    zk_connect: str,
    jvm_flags: tuple[str, ...],
    request: JavaBenchRequest,
    work_dir: Path,
) -> JavaRun:
    """Runs the benchmark to completion in `work_dir`; the JVM is killed on any error."""
    latency_file = work_dir / "java-latency.dat"
    log = work_dir / "java-bench.log"
    argv = java_bench_argv(tools, zk_connect, jvm_flags, request, latency_file)
    cpu_before = children_cpu_s()
    timeout_s = request.seconds + JAVA_OVERHEAD_TIMEOUT_S
    code = await run_jvm(argv, log, timeout_s, "BenchThroughputLatency")
    if code != 0:
        raise ClusterError(f"BenchThroughputLatency exited {code}:{log_tail(str(log))}")
    output = parse_java_output(log.read_text(errors="replace"))
    latencies = parse_latency_dump(latency_file.read_text())
    if not latencies:
        raise ClusterError(f"BenchThroughputLatency: no acknowledged add in {latency_file}")
    figures = summarise_figures(latencies, output.duration_ms / 1000, request.entry_bytes)
    return JavaRun(output, figures, request, log, children_cpu_s() - cpu_before)


async def run_jvm(argv: tuple[str, ...], log: Path, timeout_s: float, what: str) -> int:
    """Runs a JVM to its exit, its output in `log`; its exit code. ClusterError when it has
    not exited within `timeout_s`. The JVM is killed on any error, cancellation included."""
    with log.open("wb") as out:
        jvm = Child(argv, stdout=out, stderr=subprocess.STDOUT)
        try:
            return await jvm.wait(timeout_s)
        except ChildTimeoutError:
            raise ClusterError(f"{what}: no exit in {timeout_s} s:{log_tail(str(log))}") from None
        finally:
            if jvm.returncode is None:  # timed out, cancelled or interrupted: end our JVM
                await jvm.end()


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime
