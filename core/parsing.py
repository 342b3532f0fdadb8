"""Parsing of small values from text (query parameters, options)."""

from __future__ import annotations


def bounded_int(text: str, low: int, high: int) -> int | None:
    """`text` as an integer in low..high, or None when it is not one."""
    try:
        value = int(text)
    except ValueError:
        return None
    return value if low <= value <= high else None
