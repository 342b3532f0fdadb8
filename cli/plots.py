"""PNG plots next to the tables that benchmarks and drills print (matplotlib, no display)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no display on servers and in CI

import matplotlib.pyplot as plt


def latency_over_time(
    path: Path,
    title: str,
    series: dict[str, tuple[Sequence[float], Sequence[float]]],
    y_label: str = "latency (ms)",
) -> Path:
    """One line per series of (seconds since start, latency ms) points; returns `path`."""
    figure, axes = plt.subplots(figsize=(10, 4.5), dpi=100)
    for label, (seconds, values) in series.items():
        axes.plot(seconds, values, ".", markersize=2, alpha=0.6, label=label)
    axes.set_title(title)
    axes.set_xlabel("time since start (s)")
    axes.set_ylabel(y_label)
    axes.set_yscale("log")
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(loc="upper right", markerscale=4)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path)
    plt.close(figure)
    return path
