"""Liveness over a recorded history (history.py): for each fault, how long a stream went
without an acknowledged send while it lasted. Reported, never pass or fail."""

from __future__ import annotations

import statistics
from collections import defaultdict

from verify.history import Op


def unavailability(history: list[Op]) -> dict[str, list[float | None]]:
    """Per fault kind, each fault's window: the longest time any stream went without an
    acknowledged send while the fault lasted, counted from the fault (or from the stream's
    last acknowledgement inside it) to the stream's next acknowledgement, which may come
    after the heal. Streams nobody sent to after the fault do not count; a stream that never
    had a send acknowledged again makes the window None (unended). A write that was in flight
    when the fault began and landed just after it does not hide the outage that follows."""
    acked: dict[str, list[float]] = defaultdict(list)
    invoked: dict[str, list[float]] = defaultdict(list)
    for op in history:
        if op.f == "send" and op.stream is not None:
            if op.type == "ok":
                acked[op.stream].append(op.time)
            elif op.type == "invoke":
                invoked[op.stream].append(op.time)
    for times in acked.values():
        times.sort()
    found: dict[str, list[float | None]] = defaultdict(list)
    for start, end, kind in _fault_spans(history):
        waits: list[float | None] = []
        for stream, times in invoked.items():
            if not any(t > start for t in times):
                continue  # nothing was sent to it after the fault
            waits.append(_longest_gap(acked[stream], start, end))
        window = None if not waits or None in waits else max(w for w in waits if w is not None)
        found[kind].append(window)
    return dict(found)


def _fault_spans(history: list[Op]) -> list[tuple[float, float, str]]:
    """(fault time, its heal's time, kind); a fault without a heal in the history is taken
    as an instant (a kill nothing restarts): its window runs to the next acknowledgement."""
    spans: list[tuple[float, float, str]] = []
    open_faults: dict[str, list[int]] = defaultdict(list)
    for op in history:
        if op.type == "invoke" or op.f not in ("fault", "heal"):
            continue
        key = str(op.value)
        if op.f == "fault":
            open_faults[key].append(len(spans))
            spans.append((op.time, op.time, op.fault or key))
        elif open_faults[key]:
            index = open_faults[key].pop(0)
            start, _, kind = spans[index]
            spans[index] = (start, op.time, kind)
    return spans


def _longest_gap(acks: list[float], start: float, end: float) -> float | None:
    """The longest stretch without an ack that begins in [start, end], up to the next ack."""
    mark = start
    longest = 0.0
    for t in acks:
        if t <= start:
            continue
        if mark > end:
            break
        longest = max(longest, t - mark)
        mark = t
    if mark <= end:
        return None  # no acknowledgement after the last one inside the fault
    return longest


def summarise(windows: list[float | None]) -> tuple[float | None, float | None, int]:
    """Median and max of the windows that ended, and how many never did."""
    ended = [w for w in windows if w is not None]
    if not ended:
        return None, None, len(windows)
    return statistics.median(ended), max(ended), len(windows) - len(ended)
