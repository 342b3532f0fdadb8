"""Where under-replicated ledgers are recorded: BookKeeper's AutoRecovery layout in ZooKeeper.

globelog's auditor and rebuild workers keep this state exactly where and how BookKeeper keeps
it, so BookKeeper's own tools (`BookieShell listunderreplicated`, its auditor's HTTP view) read
what globelog marks, and the other way round:

    /ledgers/underreplication/LAYOUT          text: type: "BASIC" version: 1
    /ledgers/underreplication/ledgers/<hhhh>/<hhhh>/<hhhh>/<hhhh>/urL<%010d id>
                                              a marker: UnderreplicatedLedgerFormat as text
    /ledgers/underreplication/locks/urL<%010d id>
                                              a claim, ephemeral: LockDataFormat as text
    /ledgers/underreplication/auditorelection/V_<seq>
                                              a candidate auditor, ephemeral sequential
    /ledgers/underreplication/disable         present: rebuilding paused cluster-wide
    /ledgers/underreplication/checkallledgersctime
                                              when the last full check ended:
                                              CheckAllLedgersFormat, binary (as BookKeeper)

The four path parts of a marker are the ledger id's four 16-bit quarters in hex, high first.
Pure: paths and the text codec only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TypeVar

from google.protobuf import text_format
from google.protobuf.message import DecodeError, Message

from ledger.codecs.metadata import LEDGERS_ROOT
from ledger.codecs.proto import bookkeeper_pb2 as pb
from ledger.errors import MarkerFormatError

LAYOUT_TYPE, LAYOUT_VERSION = "BASIC", 1
MARKER_PREFIX = "urL"
_MARKER_NAME = re.compile(r"urL(\d{10,19})")
_QUARTER = re.compile(r"[0-9a-f]{4}")
# A marker's text holds one line per bookie of one ensemble at most; a larger one is not ours.
MARKER_BYTES_MAX = 64 * 1024

M = TypeVar("M", bound=Message)


@dataclass(frozen=True, slots=True)
class Layout:
    """The under-replication znodes under a ledgers root."""

    root: str = LEDGERS_ROOT

    @property
    def base(self) -> str:
        return f"{self.root}/underreplication"

    @property
    def layout_node(self) -> str:
        return f"{self.base}/LAYOUT"

    @property
    def markers(self) -> str:
        return f"{self.base}/ledgers"

    @property
    def locks(self) -> str:
        return f"{self.base}/locks"

    @property
    def election(self) -> str:
        return f"{self.base}/auditorelection"

    @property
    def disable_node(self) -> str:
        return f"{self.base}/disable"

    @property
    def full_check_node(self) -> str:
        return f"{self.base}/checkallledgersctime"

    def marker_parent(self, ledger_id: int) -> str:
        quarters = [f"{ledger_id >> shift & 0xFFFF:04x}" for shift in (48, 32, 16, 0)]
        return "/".join((self.markers, *quarters))

    def marker(self, ledger_id: int) -> str:
        return f"{self.marker_parent(ledger_id)}/{marker_name(ledger_id)}"

    def lock(self, ledger_id: int) -> str:
        return f"{self.locks}/{marker_name(ledger_id)}"


def marker_name(ledger_id: int) -> str:
    assert ledger_id >= 0, ledger_id
    return f"{MARKER_PREFIX}{ledger_id:010d}"


def ledger_of_marker(name: str) -> int | None:
    """The ledger id a marker or lock znode's name stands for; None for any other name."""
    match = _MARKER_NAME.fullmatch(name)
    return None if match is None else int(match.group(1))


def is_quarter(name: str) -> bool:
    """Whether `name` is one of the four hex levels above a marker."""
    return _QUARTER.fullmatch(name) is not None


@dataclass(frozen=True, slots=True)
class Marker:
    """An under-replicated ledger: the bookies whose copies are to be re-made elsewhere."""

    replicas: tuple[str, ...]
    ctime_ms: int | None = None

    def merged(self, more: tuple[str, ...], now_ms: int) -> Marker | None:
        """This marker with `more` bookies added; None when it already names every one."""
        added = tuple(b for b in dict.fromkeys(more) if b not in self.replicas)
        return Marker(self.replicas + added, now_ms) if added else None


def encode_marker(marker: Marker) -> bytes:
    message = pb.UnderreplicatedLedgerFormat(replica=list(marker.replicas))
    if marker.ctime_ms is not None:
        message.ctime = marker.ctime_ms
    return _text(message)


def decode_marker(data: bytes, where: str) -> Marker:
    message = _parse(data, pb.UnderreplicatedLedgerFormat(), where)
    ctime = message.ctime if message.HasField("ctime") else None
    return Marker(tuple(message.replica), ctime)


def encode_lock(holder: str) -> bytes:
    return _text(pb.LockDataFormat(bookieId=holder))


def decode_lock(data: bytes, where: str) -> str:
    return _parse(data, pb.LockDataFormat(), where).bookieId


def encode_vote(candidate: str) -> bytes:
    return _text(pb.AuditorVoteFormat(bookieId=candidate))


def decode_vote(data: bytes, where: str) -> str:
    return _parse(data, pb.AuditorVoteFormat(), where).bookieId


def encode_layout() -> bytes:
    return _text(pb.LedgerRereplicationLayoutFormat(type=LAYOUT_TYPE, version=LAYOUT_VERSION))


def encode_full_check_time(ended_ms: int) -> bytes:
    return pb.CheckAllLedgersFormat(checkAllLedgersCTime=ended_ms).SerializeToString()


def decode_full_check_time(data: bytes, where: str) -> int | None:
    """When the last full check ended (ms since the epoch); None when none is recorded."""
    message = pb.CheckAllLedgersFormat()
    try:
        message.ParseFromString(data)
    except DecodeError as err:
        raise MarkerFormatError(
            f"{where}: not a CheckAllLedgersFormat protobuf: {err}; received {data[:120]!r}"
        ) from err
    return message.checkAllLedgersCTime if message.HasField("checkAllLedgersCTime") else None


def check_layout(data: bytes, where: str) -> None:
    """MarkerFormatError unless `data` is the layout globelog (and BookKeeper 4.x) writes."""
    layout = _parse(data, pb.LedgerRereplicationLayoutFormat(), where)
    if (layout.type, layout.version) != (LAYOUT_TYPE, LAYOUT_VERSION):
        raise MarkerFormatError(
            f"{where}: under-replication layout {layout.type!r} version {layout.version}; "
            f"expected {LAYOUT_TYPE!r} version {LAYOUT_VERSION}"
        )


def _text(message: Message) -> bytes:
    return text_format.MessageToString(message).encode()


def _parse(data: bytes, message: M, where: str) -> M:
    if len(data) > MARKER_BYTES_MAX:
        raise MarkerFormatError(f"{where}: {len(data)} bytes; at most {MARKER_BYTES_MAX} expected")
    try:
        text_format.Parse(data.decode(), message)
    except (UnicodeDecodeError, text_format.ParseError) as err:
        raise MarkerFormatError(
            f"{where}: not a {type(message).__name__} in protobuf text format: {err}; "
            f"received {data[:120]!r}"
        ) from err
    return message
