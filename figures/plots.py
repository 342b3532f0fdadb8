"""PNG plots next to the tables that benchmarks and drills print (matplotlib, no display)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


def _pyplot() -> Any:
    """matplotlib's pyplot on the file-only backend, imported on the first plot: it costs 0.4 s
    that every command of the CLI would otherwise pay at start."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on servers and in CI
    import matplotlib.pyplot

    return matplotlib.pyplot


def latency_over_time(
    path: Path,
    title: str,
    series: dict[str, tuple[Sequence[float], Sequence[float]]],
    y_label: str = "latency (ms)",
) -> Path:
    """One line per series of (seconds since start, latency ms) points; returns `path`."""
    figure, axes = _pyplot().subplots(figsize=(10, 4.5), dpi=100)
    for label, (seconds, values) in series.items():
        axes.plot(seconds, values, ".", markersize=2, alpha=0.6, label=label)
    axes.set_title(title)
    axes.set_xlabel("time since start (s)")
    axes.set_ylabel(y_label)
    axes.set_yscale("log")
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(loc="upper right", markerscale=4)
    return _save(figure, path)


def _save(figure: Any, path: Path) -> Path:
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path)
    _pyplot().close(figure)
    return path


def delivery_report_plot(path: Path, report: Any) -> Path:
    """The delivery report (pipeline/report.py): per-minute throughput by writer region above,
    each region's delivery lag over the observation below; returns `path`."""
    figure, (rates, lags) = _pyplot().subplots(2, 1, figsize=(10, 7), dpi=100)
    regions = sorted({m.writer_region for m in report.minutes})
    for region in regions:
        minutes = [m for m in report.minutes if m.writer_region == region]
        rates.plot(
            [m.minute for m in minutes], [m.records / 60 for m in minutes], "o-", label=region
        )
    rates.set_title(f"stream {report.stream!r}: throughput per minute, by writer region")
    rates.set_ylabel("records/s")
    rates.grid(True, alpha=0.3)
    if regions:
        rates.legend(loc="upper right")
    for region, points in sorted(report.lag_points.items()):
        lags.plot([p[0] for p in points], [max(p[1], 0.1) for p in points], ".", markersize=3,
                  alpha=0.6, label=region)  # fmt: skip
    lags.set_title(f"delivery lag to a tailing reader per region ({report.observed_s:g} s)")
    lags.set_xlabel("time since the first observation (s)")
    lags.set_ylabel("lag (ms)")
    lags.set_yscale("log")
    lags.grid(True, which="both", alpha=0.3)
    if report.lag_points:
        lags.legend(loc="upper right", markerscale=4)
    return _save(figure, path)


def failover_timeline(
    path: Path,
    title: str,
    acked_s: Sequence[float],
    latencies: Sequence[tuple[float, float]],
    faults: Sequence[tuple[float, float, str]],
) -> Path:
    """Acknowledged sends per second above, send latency below, each fault a shaded span
    (start, end, kind); returns `path`."""
    figure, (rate, lat) = _pyplot().subplots(2, 1, figsize=(11, 6.5), dpi=100, sharex=True)
    end = max([*acked_s, *(f[1] for f in faults), 1.0])
    seconds = list(range(int(end) + 1))
    per_second = [0] * len(seconds)
    for t in acked_s:
        per_second[int(t)] += 1
    rate.plot(seconds, per_second, "-", linewidth=1)
    rate.set_ylabel("acknowledged sends/s")
    rate.set_title(title)
    lat.plot([p[0] for p in latencies], [max(p[1], 0.1) for p in latencies], ".", markersize=2)
    lat.set_yscale("log")
    lat.set_ylabel("send latency (ms)")
    lat.set_xlabel("time since start (s)")
    colours: dict[str, str] = {}
    for start, stop, kind in faults:
        colour = colours.setdefault(kind, f"C{len(colours) + 1}")
        for axes in (rate, lat):
            axes.axvspan(start, stop, color=colour, alpha=0.2, label=kind)
    handles, labels = rate.get_legend_handles_labels()
    unique = dict(zip(labels, handles, strict=True))
    if unique:
        rate.legend(unique.values(), unique.keys(), loc="upper right", fontsize=8)
    for axes in (rate, lat):
        axes.grid(True, alpha=0.3)
    return _save(figure, path)


def story_timeline(
    path: Path,
    title: str,
    acked_s: Sequence[float],
    delivered: Mapping[str, Sequence[tuple[float, float]]],
    faults: Sequence[tuple[float, float, str]],
) -> Path:
    """Records acknowledged and records delivered to each region so far above, each delivery's
    lag by region below (`delivered`: region -> (seconds, lag ms) points), each fault a shaded
    span (start, end, label) named on the picture; returns `path`."""
    figure, (count, lag) = _pyplot().subplots(2, 1, figsize=(12, 8), dpi=100, sharex=True)
    acked = sorted(acked_s)
    count.plot([0.0, *acked], range(len(acked) + 1), drawstyle="steps-post", color="black",
               linewidth=4, alpha=0.3, label="acknowledged to the writer")  # fmt: skip
    for index, (region, series) in enumerate(sorted(delivered.items())):
        colour = f"C{index}"
        times = sorted(p[0] for p in series)
        count.plot([0.0, *times], range(len(times) + 1), drawstyle="steps-post", color=colour,
                   linewidth=1.2, label=f"read in {region}")  # fmt: skip
        lag.plot([p[0] for p in series], [max(p[1], 1.0) for p in series], ".", color=colour,
                 markersize=3, alpha=0.6, label=region)  # fmt: skip
    count.set_title(title)
    count.set_ylabel("records so far")
    lag.set_ylabel("delivery lag (ms, send -> read)")
    lag.set_yscale("log")
    lag.set_xlabel("time since the writer started (s)")
    for index, (start, stop, label) in enumerate(faults):
        colour = ("tab:red", "tab:gray", "tab:purple")[index % 3]
        for axes in (count, lag):
            axes.axvspan(start, max(stop, start + 0.3), color=colour, alpha=0.2)
        count.text(start, 0.97 - 0.07 * index, f" {label}", transform=count.get_xaxis_transform(),
                   va="top", ha="left", fontsize=9, color=colour, fontweight="bold")  # fmt: skip
    count.legend(loc="lower right", fontsize=9)
    if delivered:
        lag.legend(loc="upper left", fontsize=9, markerscale=3)
    for axes in (count, lag):
        axes.grid(True, which="both", alpha=0.3)
    return _save(figure, path)
