"""DLSN: a record's position in its stream, (segment sequence number, entry id, slot).

The order is lexicographic over the three numbers, so one stream has one total order across
its segments. The text form is `<segment>.<entry>.<slot>` in decimal (`3.17.0`): stable, sorts
the way people expect when read, and is what the CLI, the HTTP API and the docs print.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from core.errors import InvalidDlsnError

INT64_MAX = (1 << 63) - 1
_TEXT = re.compile(r"(\d{1,19})\.(\d{1,19})\.(\d{1,19})")


@dataclass(frozen=True, order=True, slots=True)
class DLSN:
    """`segment` counts from 1 (the first segment of a stream); entry and slot from 0."""

    segment: int
    entry: int
    slot: int

    def __post_init__(self) -> None:
        # One chained check on the hot path (a DLSN per acknowledged record); details on failure.
        if 1 <= self.segment <= INT64_MAX and 0 <= self.entry <= INT64_MAX >= self.slot >= 0:
            return
        for name, value, low in (
            ("segment", self.segment, 1),
            ("entry", self.entry, 0),
            ("slot", self.slot, 0),
        ):
            if not low <= value <= INT64_MAX:
                raise InvalidDlsnError(f"DLSN {name} is {value}; expected {low}..{INT64_MAX}")

    def __str__(self) -> str:
        return f"{self.segment}.{self.entry}.{self.slot}"

    @staticmethod
    def parse(text: str) -> DLSN:
        """The DLSN written as `segment.entry.slot`; InvalidDlsnError says what was wrong."""
        match = _TEXT.fullmatch(text.strip())
        if match is None:
            raise InvalidDlsnError(
                f"DLSN {text!r} is not <segment>.<entry>.<slot> in decimal (for example 1.0.0)"
            )
        segment, entry, slot = (int(g) for g in match.groups())
        return DLSN(segment, entry, slot)

    def next_entry(self) -> DLSN:
        return DLSN(self.segment, self.entry + 1, 0)

    def next_segment(self) -> DLSN:
        return DLSN(self.segment + 1, 0, 0)


FIRST_DLSN = DLSN(1, 0, 0)  # the first position a stream can have
