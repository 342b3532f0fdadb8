"""Warm-ups that last until the cluster's JVMs have stopped compiling.

A fresh bookie's JIT compiles for minutes: with `bench proxy`'s writes going, the C2 threads
of one bookie took 6.6 % of a core in the second minute (40 % for six), and the compilers of
all nine JVMs of the local cluster were still at 5-15 % of a core four minutes in. On a
machine whose cores every process shares, a measured run that starts before that settles
times the compiler too, and two runs compared (TLS on and off) may differ only in how far
each one's JVMs had got.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from localcluster.processes import compiler_threads_cpu, load_state

JVM_KINDS = ("zookeeper", "bookie")
SETTLED_CORES = 0.05  # the JVMs' compiler threads together, below which the JIT is settled
CHECK_S = 10.0  # unmeasured work between two looks at the compiler threads
WARMUP_MAX_S_DEFAULT = 240.0
WARMUP_MAX_S_MAX = 1800.0

Threads = dict[tuple[int, int], float]


def warmup_max_problem(seconds: float) -> str | None:
    """What is wrong with a `--warmup-max-seconds`, or None."""
    if 0 <= seconds <= WARMUP_MAX_S_MAX:
        return None
    return f"--warmup-max-seconds {seconds}: expected 0..{WARMUP_MAX_S_MAX:.0f}"


def jit_threads_cpu(data_dir: Path) -> Threads:
    """CPU seconds so far of each compiler thread of the cluster's JVMs, by (pid, tid)."""
    found: Threads = {}
    for record in load_state(data_dir).values():
        if record.kind in JVM_KINDS:
            with contextlib.suppress(OSError):  # a process that ended counts no more
                threads = compiler_threads_cpu(record.pid)
                found.update({(record.pid, tid): cpu for tid, cpu in threads.items()})
    return found


def jit_cpu_between(before: Threads, after: Threads) -> float:
    """CPU seconds the compiler threads spent between two samples: each thread alive at the
    second counted from its first sample, or from 0 if it started since (a thread that ended
    in between is missed: the JVM ends compiler threads that have nothing to do)."""
    return sum(max(0.0, cpu - before.get(thread, 0.0)) for thread, cpu in after.items())


async def until_jit_settled(
    data_dir: Path,
    load: Callable[[int, float], Awaitable[object]],
    max_s: float,
    progress: Callable[[str], None],
    started: float | None = None,
) -> str:
    """Calls `load(turn, CHECK_S)` (unmeasured work for that long) again and again until the
    compiler threads of the cluster's JVMs use under SETTLED_CORES, or `max_s` since
    `started` (default: now) would pass. Returns the report's line on the warm-up."""
    started = time.monotonic() if started is None else started
    turn = 0
    cores: float | None = None  # the compilers' share over the last turn
    while True:
        waited = time.monotonic() - started
        if waited + CHECK_S > max_s:
            where = "" if cores is None else f", the JVMs' JIT compilers still at {cores:.1%}"
            return f"warm-up: {waited:.0f} s of unmeasured work, the most allowed{where}"
        before, at = jit_threads_cpu(data_dir), time.monotonic()
        await load(turn, CHECK_S)
        cores = jit_cpu_between(before, jit_threads_cpu(data_dir)) / (time.monotonic() - at)
        if cores < SETTLED_CORES:
            return (
                f"warm-up: {time.monotonic() - started:.0f} s of unmeasured work, until the "
                f"JVMs' JIT compilers used {cores:.1%} of a core (settled below "
                f"{SETTLED_CORES:.0%})"
            )
        progress(f"warm-up: JIT compilers at {cores:.0%} of a core; on")
        turn += 1
