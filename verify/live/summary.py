"""A live failover run's figures for people, from its history: send latency during and outside
faults, how much of what was acknowledged each region's tailing readers read, the timeline."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from figures.percentiles import percentile
from figures.plots import failover_timeline
from verify.history import Op


def fault_spans(history: list[Op]) -> list[tuple[float, float, str]]:
    """(start, end, kind) of each fault, from its fault op to its heal op."""
    spans, open_at = [], None
    for op in history:
        if op.f == "fault":
            open_at = op
        elif op.f == "heal" and open_at is not None:
            spans.append((open_at.time, op.time, str(open_at.fault)))
            open_at = None
    return spans


def _send_latencies(history: list[Op]) -> list[tuple[float, float]]:
    """(completion time, latency ms) of every acknowledged send."""
    invoked: dict[int, float] = {}
    found = []
    for op in history:
        if op.f == "send" and type(op.value) is int:
            if op.type == "invoke":
                invoked[op.value] = op.time
            elif op.type == "ok" and op.value in invoked:
                found.append((op.time, (op.time - invoked[op.value]) * 1000))
    return found


def latency_split(history: list[Op]) -> dict[str, dict[str, float]]:
    """Send latency percentiles (ms) for sends completed during a fault and outside them."""
    spans = fault_spans(history)
    during: list[float] = []
    outside: list[float] = []
    for at, ms in _send_latencies(history):
        (during if any(a <= at <= b for a, b, _ in spans) else outside).append(ms)
    return {
        name: _percentiles(values) for name, values in (("during", during), ("outside", outside))
    }


def _percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {"count": 0}
    ordered = sorted(values)

    def at(p: float) -> float:
        return round(percentile(ordered, p), 1)

    return {"count": len(ordered), "p50": at(50), "p90": at(90), "p99": at(99),
            "max": round(ordered[-1], 1)}  # fmt: skip


def timeline(history: list[Op], path: Path, seed: int) -> Path:
    acked = [op.time for op in history if op.f == "send" and op.type == "ok"]
    return failover_timeline(
        path,
        f"failover run, seed {seed}: acknowledged sends and their latency, faults shaded",
        acked, _send_latencies(history), fault_spans(history),
    )  # fmt: skip


def tail_coverage(history: list[Op]) -> dict[str, dict[str, int]]:
    """Per region: the sends acknowledged, how many of them its tailing readers read, and
    their failed polls (errors answered, or no answer). Every tail reads every stream, so a
    region whose readers kept up reads every acknowledged value."""
    acked = {(op.stream, op.value) for op in history if op.f == "send" and op.type == "ok"}
    read: dict[str, set[tuple[str | None, int]]] = defaultdict(set)
    failed: dict[str, int] = defaultdict(int)
    for op in history:
        if op.f != "poll" or op.region is None:
            continue
        if op.type == "ok":
            read[op.region].update((op.stream, value) for _, value in op.records)
        else:
            failed[op.region] += 1
    return {
        region: {
            "acked": len(acked),
            "read": len(acked & read[region]),
            "failed_polls": failed[region],
        }
        for region in sorted(set(read) | set(failed))
    }
