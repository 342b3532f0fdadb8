"""Pure figures of `globelog bench ledger`: run summaries (percentiles from figures/), Java
benchmark output.

No IO here: the driver (`benchmarks.ledger`) hands in latencies and captured text.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from core.errors import ClusterError
from figures.percentiles import percentile

MB = 1_000_000  # throughput in MB/s is payload bytes / 10^6 per second
NS_PER_MS = 1_000_000


@dataclass(frozen=True, slots=True)
class AddFigures:
    """Throughput and per-add latency (submit to acknowledgement) of one measured run."""

    adds: int
    elapsed_s: float
    entry_bytes: int
    median_ms: float
    p95_ms: float
    p99_ms: float
    p999_ms: float
    max_ms: float

    @property
    def adds_per_s(self) -> float:
        return self.adds / self.elapsed_s

    @property
    def mb_per_s(self) -> float:
        return self.adds_per_s * self.entry_bytes / MB


def summarise(latencies_ms: Iterable[float], elapsed_s: float, entry_bytes: int) -> AddFigures:
    """Figures of a run whose acknowledged adds took `latencies_ms`, over `elapsed_s`."""
    ordered = sorted(latencies_ms)
    assert ordered, "a run without acknowledged adds has no figures"
    assert elapsed_s > 0, elapsed_s
    return AddFigures(
        adds=len(ordered),
        elapsed_s=elapsed_s,
        entry_bytes=entry_bytes,
        median_ms=percentile(ordered, 50),
        p95_ms=percentile(ordered, 95),
        p99_ms=percentile(ordered, 99),
        p999_ms=percentile(ordered, 99.9),
        max_ms=ordered[-1],
    )


def ensemble_regions(
    ensembles: Iterable[Sequence[str]], region_of: dict[str, str]
) -> dict[tuple[str, ...], int]:
    """How many ledgers had each tuple of ensemble regions (in ensemble position order)."""
    return dict(Counter(tuple(region_of.get(b, "?") for b in e) for e in ensembles))


def describe_regions(counts: dict[tuple[str, ...], int], orders_max: int = 4) -> str:
    """'us-east,us-west,eu-west x16': each region order, the most frequent first; beyond
    `orders_max` orders (random placement), how many ledgers span 3, 2, 1 region(s)."""
    parts = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    if len(parts) <= orders_max:
        return "; ".join(f"{','.join(regions)} x{n}" for regions, n in parts)
    spans: Counter[int] = Counter()
    for regions, n in parts:
        spans[len(set(regions))] += n
    return (
        "; ".join(f"{span} region(s) x{spans[span]}" for span in sorted(spans, reverse=True))
        + f" ({len(parts)} region orders)"
    )


# ------------------------------------------------------------------------------------------
# BookKeeper's org.apache.bookkeeper.benchmark.BenchThroughputLatency (4.17), as it logs


@dataclass(frozen=True, slots=True)
class JavaBenchOutput:
    """What BenchThroughputLatency printed about its measured run (warm-up excluded)."""

    completions: int
    duration_ms: int
    ops_per_s: int
    p95_ms: float  # its own figures: sorted[floor(n * p / 100) - 1], nanoseconds / 10^6
    p99_ms: float
    warmup_ops_per_s: int | None  # None with -skipwarmup
    ensembles: tuple[tuple[str, ...], ...]  # of the measured ledgers, in creation order


_COMPLETIONS = re.compile(r"(\d+) completions in (\d+) milliseconds: (\d+) ops/sec")
_PERCENTILE = re.compile(r"(\d+)th percentile latency: ([0-9.]+)")
_WARMUP_TP = re.compile(r"Warmup tp: (-?\d+)")
_WARMUP_DONE = "Warmup phase finished"
_ENSEMBLE = re.compile(r"Ensemble: \[([^\]]*)\] for ledger: (\d+)")


def parse_java_output(text: str) -> JavaBenchOutput:
    """The figures of BenchThroughputLatency's log (stdout and stderr together).

    Raises ClusterError naming the line that is missing, with the end of the text.
    """
    completions = _COMPLETIONS.search(text)
    percentiles = {int(m[1]): float(m[2]) for m in _PERCENTILE.finditer(text)}
    if completions is None or not {95, 99} <= set(percentiles):
        missing = "'N completions in N milliseconds'" if completions is None else "percentiles"
        raise ClusterError(
            f"BenchThroughputLatency output: no {missing} line; it ended with:\n{text[-1500:]}"
        )
    warmup = _WARMUP_TP.search(text)
    measured = text.split(_WARMUP_DONE, 1)[-1]  # ledgers logged after warm-up are the measured
    ensembles = tuple(
        tuple(b.strip() for b in m[1].split(",") if b.strip()) for m in _ENSEMBLE.finditer(measured)
    )
    return JavaBenchOutput(
        completions=int(completions[1]),
        duration_ms=int(completions[2]),
        ops_per_s=int(completions[3]),
        p95_ms=percentiles[95],
        p99_ms=percentiles[99],
        warmup_ops_per_s=int(warmup[1]) if warmup else None,
        ensembles=ensembles,
    )


def parse_latency_dump(text: str) -> list[float]:
    """Latencies in ms from BenchThroughputLatency's -latencyFile: '<nanoseconds>\\t<ms>ms' lines."""
    latencies: list[float] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        field = line.split("\t", 1)[0]
        if not field.isdigit():
            raise ClusterError(
                f"latency dump line {number}: {line[:80]!r}; expected '<nanoseconds>\\t<ms>ms'"
            )
        latencies.append(int(field) / NS_PER_MS)
    return latencies
