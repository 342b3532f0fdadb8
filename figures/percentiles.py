"""Percentiles of measured samples, one definition for every figure globelog prints: the
benchmarks' latencies, the demo's and the failover run's summaries."""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction


def percentile(ordered: Sequence[float], p: float) -> float:
    """Nearest-rank percentile of ascending `ordered`: the smallest sample with at least
    p % of all samples at or below it (exact for p given in decimal, e.g. 99.9)."""
    assert ordered, "percentile of no samples"
    assert 0 < p <= 100, p
    rank = math.ceil(Fraction(str(p)) * len(ordered) / 100)  # Fraction: 99.9 % of 1000 is 999
    return ordered[max(rank, 1) - 1]
