"""Parses topology.yaml's optional `streams:` section (cluster-wide writer defaults).

Problems go to the topology loader's collector, each with its YAML path, so a topology with
a bad `streams:` section reports them together with every other problem.
"""

from __future__ import annotations

from typing import Any, Protocol

from core.entry_format import Codec
from core.streams import StreamSettings, TransmitPolicy

GIB = 1 << 30
STREAM_KEYS = {
    "segment_roll_bytes",
    "segment_roll_s",
    "transmit",
    "buffer_bytes",
    "flush_interval_ms",
    "flush_sla_ms",
    "compression",
    "lock_timeout_s",
}


class Problems(Protocol):
    def add(self, path: str, message: str) -> None: ...


def _number(value: Any, low: float, high: float) -> float | None:
    if type(value) in (int, float) and low <= value <= high:
        return float(value)
    return None


def parse_streams(node: Any, p: Problems) -> StreamSettings | None:
    """The settings in `node` (None or a mapping) over the built-in defaults."""
    defaults = StreamSettings()
    if node is None:
        return defaults
    if not isinstance(node, dict):
        p.add("streams", f"expected a mapping, got {type(node).__name__}")
        return None
    ok = True

    def bad(key: str, expected: str) -> None:
        nonlocal ok
        ok = False
        p.add(f"streams.{key}", f"expected {expected}, got {node[key]!r}")

    for key in sorted(set(node) - STREAM_KEYS, key=str):
        ok = False
        p.add(f"streams.{key}", f"unknown key; expected one of {sorted(STREAM_KEYS)}")
    values: dict[str, Any] = {}
    numeric = {
        "segment_roll_bytes": (1024, 64 * GIB, "an integer number of bytes 1024..64 GiB", 1),
        "segment_roll_s": (1, 30 * 86400, "seconds 1..2592000", 1),
        "buffer_bytes": (0, 1 << 20, "an integer number of bytes 0..1048576", 1),
        "flush_interval_ms": (1, 10_000, "milliseconds 1..10000", 1e-3),
        "flush_sla_ms": (1, 60_000, "milliseconds 1..60000", 1e-3),
        "lock_timeout_s": (0, 600, "seconds 0..600", 1),
    }
    for key, (low, high, expected, scale) in numeric.items():
        if key not in node:
            continue
        number = _number(node[key], low, high)
        if number is None or (key.endswith("_bytes") and type(node[key]) is not int):
            bad(key, expected)
            continue
        name = key.removesuffix("_ms") + "_s" if key.endswith("_ms") else key
        values[name] = int(number) if key.endswith("_bytes") else number * scale
    if "transmit" in node:
        names = [t.value for t in TransmitPolicy]
        if node["transmit"] in names:
            values["transmit"] = TransmitPolicy(node["transmit"])
        else:
            bad("transmit", f"one of {names}")
    if "compression" in node:
        names = [c.name.lower() for c in Codec]
        if node["compression"] in names:
            values["compression"] = node["compression"]
        else:
            bad("compression", f"one of {names}")
    if not ok:
        return None
    fields = {f: getattr(defaults, f) for f in StreamSettings.__dataclass_fields__}
    return StreamSettings(**(fields | values))
