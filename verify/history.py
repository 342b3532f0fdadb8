"""A failover run's history: every operation's invocation and completion, one JSON object a
line (docs/failover.md), in the style of Jepsen's histories.

    {"time": 12.031, "process": "w-us-east-0", "type": "invoke", "f": "send",
     "stream": "s1", "value": 417, "idempotent": true}
    {"time": 12.118, "process": "w-us-east-0", "type": "ok", "f": "send",
     "stream": "s1", "value": 417, "dlsn": "3.12.0"}
    {"time": 12.5, "process": "r-eu-west-0", "type": "ok", "f": "poll", "stream": "s1",
     "region": "eu-west", "records": [["3.11.0", 416], ["3.12.0", 417]]}
    {"time": 30.0, "process": "nemesis", "type": "info", "f": "fault", "value": "kill wp-us-east",
     "fault": "kill-write-proxy"}
    {"time": 95.0, "process": "final-us-west", "type": "ok", "f": "final", "stream": "s1",
     "region": "us-west", "records": [["1.0.0", 0], ...], "lost": [["2.4.0", "2.9.0"]],
     "bound_s": 60.0, "detail": "read to the end after 0.4 s; data lost from 2.4.0 to 2.9.0"}
    {"time": 95.5, "process": "proxy-final-eu-west", "type": "ok", "f": "proxy-final",
     "stream": "s1", "region": "eu-west", "records": [["1.0.0", 0], ...], "bound_s": 15.0,
     "detail": "bound ran out; last answer metadata_unavailable: ..."}
    {"time": 96.0, "process": "auditor", "type": "ok", "f": "audit", "stream": "s1",
     "segment": 3, "value": true, "detail": "every ensemble spans 2 regions"}

`type` is invoke | ok | fail | info (Jepsen's: `fail` means the operation certainly did not
happen, `info` that it may or may not have). A send's `value` is unique in the run. A final
read's `lost` holds each range of records (first and last DLSN) the reader found no bookie could
serve; a final read that did not end (its bound ran out, or an error answered stopped it) is
`info`, with what it read until then.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.dlsn import DLSN
from core.errors import ConfigError, InvalidDlsnError

TYPES = frozenset({"invoke", "ok", "fail", "info"})
# `final` is a full read through the ledger client (the library), `proxy-final` one through a
# region's read proxy (what users read through), `catch-up` the harness's wait for its tailing
# readers to reach the acknowledged end before the final reads. `held` ends a fault held
# until something happened (a wiped bookie's copies re-made); `replicas` is the read-back of
# every settled fragment's copies after the ensemble `audit`. `revive` is a process that had
# exited on its own started again after a heal, as the deployment's supervisor would.
FUNCTIONS = frozenset(
    {"send", "poll", "final", "proxy-final", "catch-up", "fault", "held", "heal", "revive",
     "audit", "replicas"}
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Op:
    index: int  # its line in the history, from 0
    time: float
    process: str
    type: str
    f: str
    stream: str | None = None
    value: Any = None
    dlsn: DLSN | None = None
    region: str | None = None
    records: tuple[tuple[DLSN, int], ...] = ()
    lost: tuple[tuple[DLSN, DLSN], ...] = ()  # a final read's ranges no bookie could serve
    idempotent: bool = False
    fault: str | None = None
    segment: int | None = None
    detail: str = ""
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    def describe(self) -> str:
        """A short form for reports: `#17 w-us-east-0 ok send s1 417 @3.12.0`."""
        where = f" @{self.dlsn}" if self.dlsn is not None else ""
        what = f" {self.value}" if self.value is not None and self.f != "poll" else ""
        stream = f" {self.stream}" if self.stream else ""
        return f"#{self.index} {self.process} {self.type} {self.f}{stream}{what}{where}"


def parse_op(line: str, index: int) -> Op:
    """One history line; ConfigError naming the line and the field when it is malformed."""
    try:
        body = json.loads(line)
    except json.JSONDecodeError as err:
        raise ConfigError(f"history line {index + 1}: not JSON: {err}") from None
    if not isinstance(body, dict):
        raise ConfigError(f"history line {index + 1}: expected an object, got {body!r:.60}")
    problems = []
    kind, f = body.get("type"), body.get("f")
    if kind not in TYPES:
        problems.append(f"type {kind!r} (expected one of {sorted(TYPES)})")
    if f not in FUNCTIONS:
        problems.append(f"f {f!r} (expected one of {sorted(FUNCTIONS)})")
    time, process = body.get("time"), body.get("process")
    if type(time) not in (int, float):
        problems.append(f"time {time!r} (expected seconds)")
    if not isinstance(process, str) or not process:
        problems.append(f"process {process!r} (expected a name)")
    try:
        dlsn = DLSN.parse(body["dlsn"]) if body.get("dlsn") is not None else None
        records = tuple(_record(r) for r in body.get("records") or ())
        lost = tuple(_lost_range(r) for r in body.get("lost") or ())
    except (InvalidDlsnError, TypeError, ValueError) as err:
        problems.append(f"dlsn, records or lost: {err}")
        dlsn, records, lost = None, (), ()
    if problems:
        raise ConfigError(f"history line {index + 1}: " + "; ".join(problems))
    known = {"time", "process", "type", "f", "stream", "value", "dlsn", "region", "records", "lost"}
    known |= {"idempotent", "fault", "segment", "detail"}
    assert isinstance(process, str) and isinstance(kind, str) and isinstance(f, str)
    assert isinstance(time, int | float)
    return Op(
        index=index,
        time=float(time),
        process=process,
        type=kind,
        f=f,
        stream=body.get("stream"),
        value=body.get("value"),
        dlsn=dlsn,
        region=body.get("region"),
        records=records,
        lost=lost,
        idempotent=bool(body.get("idempotent", False)),
        fault=body.get("fault"),
        segment=body.get("segment"),
        detail=str(body.get("detail", "")),
        extra={k: v for k, v in body.items() if k not in known},
    )


def _record(item: Any) -> tuple[DLSN, int]:
    if not (isinstance(item, list | tuple) and len(item) == 2):
        raise ValueError(f"record {item!r:.60} (expected [dlsn, value])")
    dlsn, value = item
    if not isinstance(dlsn, str) or type(value) is not int:
        raise ValueError(f"record {item!r:.60} (expected [dlsn text, integer value])")
    return DLSN.parse(dlsn), value


def _lost_range(item: Any) -> tuple[DLSN, DLSN]:
    if not (isinstance(item, list | tuple) and len(item) == 2):
        raise ValueError(f"lost range {item!r:.60} (expected [first dlsn, last dlsn])")
    first, last = (DLSN.parse(d) if isinstance(d, str) else None for d in item)
    if first is None or last is None or last < first:
        raise ValueError(f"lost range {item!r:.60} (expected [first dlsn, last dlsn] as text)")
    return first, last


def encode_op(body: dict[str, Any]) -> str:
    """One history line for an operation given as a dict (DLSNs as text)."""
    return json.dumps(body, separators=(",", ":"), sort_keys=True, default=str)


def read_history(lines: Iterable[str]) -> list[Op]:
    return [parse_op(line, i) for i, line in enumerate(lines) if line.strip()]


def load_history(path: Path) -> list[Op]:
    try:
        with path.open(encoding="utf-8") as file:
            return read_history(file)
    except OSError as err:
        raise ConfigError(f"history {path}: cannot be read: {err.strerror}") from err


def completions(history: list[Op], f: str) -> Iterator[Op]:
    """The completed (ok, fail, info) operations of one function, in history order."""
    return (op for op in history if op.f == f and op.type != "invoke")
