"""Stream and namespace names, and the stream settings a writer runs with (topology `streams:`)."""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

from core.errors import InvalidStreamNameError

NAME_CHARS_MAX = 128
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
DEFAULT_NAMESPACE = "default"


def check_name(name: str, what: str = "stream") -> str:
    """`name` if it is a valid stream or namespace name (it becomes a znode name)."""
    if not (0 < len(name) <= NAME_CHARS_MAX and _NAME.fullmatch(name)):
        raise InvalidStreamNameError(
            f"{what} name {name!r} is invalid; expected 1..{NAME_CHARS_MAX} characters of "
            "letters, digits, '.', '_' and '-', starting with a letter or digit"
        )
    return name


class TransmitPolicy(enum.Enum):
    """When buffered records go out as one entry.

    immediate: every write is transmitted at once (lowest latency, one entry per write call);
    periodic: the buffer is transmitted every flush interval, or sooner when it is full;
    size: the buffer is transmitted when it reaches `buffer_bytes` (and at the flush SLA).
    """

    IMMEDIATE = "immediate"
    PERIODIC = "periodic"
    SIZE = "size"


@dataclass(frozen=True, slots=True)
class StreamSettings:
    """A writer's settings; the cluster-wide defaults come from topology.yaml `streams:`.

    flush_sla_s: after an acknowledged entry, the longest a reader may wait to see it. With no
    data entry to carry the LAC within it, the writer sends a control record.
    """

    segment_roll_bytes: int = 256 * 1024 * 1024
    segment_roll_s: float = 2 * 3600.0
    transmit: TransmitPolicy = TransmitPolicy.SIZE
    buffer_bytes: int = 64 * 1024
    flush_interval_s: float = 0.002
    flush_sla_s: float = 0.05
    compression: str = "none"
    lock_timeout_s: float = 0.0  # how long open waits for another owner to go; 0: fail at once
    pending_writes_max: int = 100_000  # writes accepted and not yet acknowledged

    def __post_init__(self) -> None:
        assert self.segment_roll_bytes > 0 and self.segment_roll_s > 0, self
        assert self.buffer_bytes >= 0 and self.flush_interval_s > 0, self
        assert self.flush_sla_s > 0 and self.pending_writes_max > 0, self


# Custom metadata on each segment ledger, so `globelog ledger show` and BookKeeper's own tools
# tell which stream and segment a ledger holds.
LEDGER_STREAM_KEY = "globelog.stream"
LEDGER_SEGMENT_KEY = "globelog.segment"
# and its namespace, so a rebuilder can tell whether the stream has an owner (rebuild/worker.py)
LEDGER_NAMESPACE_KEY = "globelog.namespace"
