"""Ledger metadata in BookKeeper's v3 znode format, ledger znode paths, and ledger id generation.

The v3 format (LedgerMetadataSerDe, BookKeeper >= 4.9) is the ASCII header
"BookieMetadataFormatVersion\\t3\\n" followed by a LedgerMetadataFormat protobuf (DataFormats.proto)
written with writeDelimitedTo: a varint byte length, then the message. Older formats (v1 text,
v2 protobuf text) are refused: globelog only reads ledgers written by BookKeeper >= 4.9 or by
itself.
"""

from __future__ import annotations

import bisect
import collections
import enum
import re
from dataclasses import dataclass, field

from ledger.codecs.entry import DigestType
from ledger.codecs.message_codec import known, optional, parse_message, required, text
from ledger.codecs.proto import bookkeeper_pb2 as pb
from ledger.codecs.varint import decode_varint, encode_varint
from ledger.codes import INVALID_ENTRY_ID
from ledger.errors import LedgerIdOverflowError, MetadataFormatError, ProtocolError

FORMAT_VERSION = 3
_VERSION_KEY = b"BookieMetadataFormatVersion\t"
_VERSION_DIGITS_MAX = 10  # LedgerMetadataSerDe.MAX_VERSION_DIGITS
# ZooKeeper's default jute.maxbuffer: no znode (so no metadata) is larger.
METADATA_BYTES_MAX = 1024 * 1024
# The root of BookKeeper's ledger znodes by default (zkLedgersRootPath).
LEDGERS_ROOT = "/ledgers"
# Ids below this live in the 2-4-4 layout and come from the 31-bit generator (Integer.MAX_VALUE).
SHORT_ID_LIMIT = (1 << 31) - 1
_INT64_MAX = (1 << 63) - 1
# Bounds on the text of an invalid-metadata error (hostile input can hold millions of faults).
PROBLEMS_SHOWN_MAX = 8
BOOKIES_SHOWN_MAX = 16


class LedgerState(enum.IntEnum):
    """LedgerMetadataFormat.State numbers."""

    OPEN = 1
    IN_RECOVERY = 2
    CLOSED = 3


_STATES = {int(state): state for state in LedgerState}
_DIGESTS = {int(digest): digest for digest in DigestType}


@dataclass(frozen=True, slots=True)
class Ensemble:
    """One segment of the ensemble history: the bookies serving entries from first_entry_id on."""

    first_entry_id: int
    bookies: tuple[str, ...]  # bookie ids, e.g. "10.0.0.1:3181", in ensemble order


@dataclass(frozen=True, slots=True)
class LedgerMetadata:
    """What a ledger znode holds. Instances are valid by construction (MetadataFormatError)."""

    ensemble_size: int
    write_quorum: int
    ack_quorum: int
    ensembles: tuple[Ensemble, ...]
    digest_type: DigestType
    password: bytes
    state: LedgerState = LedgerState.OPEN
    last_entry_id: int = INVALID_ENTRY_ID  # meaningful only when CLOSED
    length: int = 0  # bytes; meaningful only when CLOSED
    ctime: int | None = None  # creation time, ms since the epoch; BookKeeper may leave it out
    custom_metadata: tuple[tuple[str, bytes], ...] = field(default=())
    ctoken: int = 0

    def __post_init__(self) -> None:
        problems = _problems(self)
        if problems:
            shown = "; ".join(problems[:PROBLEMS_SHOWN_MAX])
            more = len(problems) - PROBLEMS_SHOWN_MAX
            tail = f"; and {more} more" if more > 0 else ""
            raise MetadataFormatError(f"ledger metadata is invalid: {shown}{tail}")

    @property
    def current_ensemble(self) -> tuple[str, ...]:
        """The ensemble new entries go to (the last one)."""
        return self.ensembles[-1].bookies

    def ensemble_for_entry(self, entry_id: int) -> tuple[str, ...]:
        """The ensemble that stores `entry_id`: the last one starting at or before it."""
        assert entry_id >= 0, f"entry ids start at 0, got {entry_id}"
        firsts = [ensemble.first_entry_id for ensemble in self.ensembles]
        return self.ensembles[bisect.bisect_right(firsts, entry_id) - 1].bookies

    def write_set(self, entry_id: int) -> tuple[str, ...]:
        """The write quorum of `entry_id`, in BookKeeper's round-robin order."""
        ensemble = self.ensemble_for_entry(entry_id)
        return tuple(
            ensemble[i] for i in write_set_indices(entry_id, len(ensemble), self.write_quorum)
        )


def write_set_indices(entry_id: int, ensemble_size: int, write_quorum: int) -> tuple[int, ...]:
    """Ensemble positions storing `entry_id`: e, e+1, …, e+W-1 (mod E).

    (BookKeeper's RoundRobinDistributionSchedule.)
    """
    return tuple((entry_id + i) % ensemble_size for i in range(write_quorum))


def _problems(md: LedgerMetadata) -> list[str]:
    """Everything wrong with `md`; each ensemble's problems only up to a bound, so hostile
    metadata (a znode of a million empty ensembles) cannot make a huge error."""
    problems: list[str] = []
    if not 1 <= md.ack_quorum <= md.write_quorum <= md.ensemble_size:
        problems.append(
            f"quorums must satisfy 1 <= ack ({md.ack_quorum}) <= write ({md.write_quorum}) "
            f"<= ensemble size ({md.ensemble_size})"
        )
    if not md.ensembles:
        problems.append("the ensemble history is empty")
    elif md.ensembles[0].first_entry_id != 0:
        problems.append(
            f"the first ensemble starts at entry {md.ensembles[0].first_entry_id}, not 0"
        )
    for index, ensemble in enumerate(md.ensembles):
        if len(problems) > PROBLEMS_SHOWN_MAX:
            problems.append("(further ensembles not checked)")
            break
        where = f"ensembles[{index}]"
        if index and ensemble.first_entry_id <= md.ensembles[index - 1].first_entry_id:
            problems.append(
                f"{where} starts at entry {ensemble.first_entry_id}, not after the previous one"
            )
        if len(ensemble.bookies) != md.ensemble_size:
            problems.append(
                f"{where} has {len(ensemble.bookies)} bookies; expected {md.ensemble_size}"
            )
        if len(set(ensemble.bookies)) != len(ensemble.bookies) or "" in ensemble.bookies:
            shown = list(ensemble.bookies[:BOOKIES_SHOWN_MAX])
            more = "..." if len(ensemble.bookies) > BOOKIES_SHOWN_MAX else ""
            problems.append(f"{where} has an empty or repeated bookie id: {shown}{more}")
    if md.state is LedgerState.CLOSED:
        if md.last_entry_id < INVALID_ENTRY_ID or md.length < 0:
            problems.append(f"closed at entry {md.last_entry_id} with length {md.length}")
    elif (md.last_entry_id, md.length) != (INVALID_ENTRY_ID, 0):
        problems.append(
            f"{md.state.name} but has last entry {md.last_entry_id} and length {md.length}"
        )
    counts = collections.Counter(key for key, _ in md.custom_metadata)
    repeated = sorted(key for key, count in counts.items() if count > 1)
    if repeated:
        problems.append(f"custom metadata repeats a key: {repeated[:BOOKIES_SHOWN_MAX]}")
    return problems


# ---------------------------------------------------------------------------- v3 serialization


def serialize_metadata(md: LedgerMetadata) -> bytes:
    """The znode bytes BookKeeper's LedgerMetadataSerDe writes for `md` (format version 3)."""
    message = pb.LedgerMetadataFormat(
        quorumSize=md.write_quorum,
        ensembleSize=md.ensemble_size,
        length=md.length,
        lastEntryId=md.last_entry_id,
        state=md.state,
        digestType=md.digest_type,
        password=md.password,
        ackQuorumSize=md.ack_quorum,
        ctime=md.ctime,
        cToken=md.ctoken,
    )
    for ensemble in md.ensembles:
        message.segment.add(
            ensembleMember=[bookie.encode() for bookie in ensemble.bookies],
            firstEntryId=ensemble.first_entry_id,
        )
    for key, value in md.custom_metadata:
        message.customMetadata.add(key=key.encode(), value=value)
    body = message.SerializeToString()
    header = _VERSION_KEY + str(FORMAT_VERSION).encode() + b"\n"
    return header + encode_varint(len(body)) + body


def parse_metadata(data: bytes) -> LedgerMetadata:
    """The metadata in a ledger znode; MetadataFormatError if it is not valid v3 metadata."""
    if len(data) > METADATA_BYTES_MAX:
        raise MetadataFormatError(
            f"ledger metadata is {len(data)} bytes; the limit is {METADATA_BYTES_MAX}"
        )
    pos = _read_header(data)
    try:
        length, pos = decode_varint(data, pos, "ledger metadata length")
        if pos + length != len(data):
            raise MetadataFormatError(
                f"ledger metadata announces {length} protobuf bytes after the header; "
                f"{len(data) - pos} follow"
            )
        what = "LedgerMetadataFormat"
        return _decode(parse_message(pb.LedgerMetadataFormat(), data[pos:], what), what)
    except MetadataFormatError:
        raise
    except ProtocolError as err:
        raise MetadataFormatError(f"ledger metadata: {err}") from err


def _read_header(data: bytes) -> int:
    """Position after the version line; MetadataFormatError unless it names version 3."""
    if not data.startswith(_VERSION_KEY):
        raise MetadataFormatError(
            f"ledger metadata does not start with {_VERSION_KEY!r}: "
            f"got {data[: len(_VERSION_KEY)]!r}"
        )
    start = len(_VERSION_KEY)
    newline = data.find(b"\n", start, start + _VERSION_DIGITS_MAX + 1)
    digits = data[start:newline]
    if newline < 0 or not digits.isdigit():
        raise MetadataFormatError(f"ledger metadata has no version number line: {data[:40]!r}")
    if int(digits) != FORMAT_VERSION:
        raise MetadataFormatError(
            f"ledger metadata format version {int(digits)}; only version {FORMAT_VERSION} "
            f"(BookKeeper >= 4.9) is supported"
        )
    return newline + 1


def _decode(message: pb.LedgerMetadataFormat, what: str) -> LedgerMetadata:
    write_quorum: int = required(message, "quorumSize", what)
    state: LedgerState = known(
        _STATES, required(message, "state", what), "state", "LedgerState", what
    )
    length: int = required(message, "length", what)  # meaningful only when CLOSED
    last_entry_id = INVALID_ENTRY_ID
    if state is LedgerState.CLOSED:
        last_entry_id = required(message, "lastEntryId", what)
    else:
        length = 0  # as BookKeeper: an unclosed ledger has no length and no last entry yet
    ensembles = []
    for index, segment in enumerate(message.segment):
        where = f"{what} segment[{index}]"
        bookies = tuple(text(raw, "ensembleMember", where) for raw in segment.ensembleMember)
        ensembles.append(Ensemble(required(segment, "firstEntryId", where), bookies))
    custom = [
        (text(entry.key, "customMetadata key", what), entry.value)
        for entry in message.customMetadata
    ]
    ack_quorum = optional(message, "ackQuorumSize")
    digest = required(message, "digestType", what)
    return LedgerMetadata(
        ensemble_size=required(message, "ensembleSize", what),
        write_quorum=write_quorum,
        ack_quorum=write_quorum if ack_quorum is None else ack_quorum,  # as LedgerMetadataSerDe
        ensembles=tuple(ensembles),
        digest_type=known(_DIGESTS, digest, "digestType", "DigestType", what),
        password=required(message, "password", what),
        state=state,
        last_entry_id=last_entry_id,
        length=length,
        ctime=optional(message, "ctime"),
        custom_metadata=tuple(custom),
        ctoken=message.cToken,
    )


# ------------------------------------------------------------------------------ znode layout


def ledger_path(ledger_id: int, root: str = LEDGERS_ROOT) -> str:
    """The ledger's metadata znode under BookKeeper's default (zk+hierarchical) ledger manager.

    Ids below 2^31-1 use the legacy 2-4-4 split of the 10-digit id ("/ledgers/00/0000/L0001");
    larger ids the long 3-4-4-4-4 split of the 19-digit id (HierarchicalLedgerManager).
    """
    assert 0 <= ledger_id <= _INT64_MAX, f"ledger ids are non-negative int64, got {ledger_id}"
    if ledger_id < SHORT_ID_LIMIT:
        digits = f"{ledger_id:010d}"
        return f"{root}/{digits[0:2]}/{digits[2:6]}/L{digits[6:10]}"
    digits = f"{ledger_id:019d}"
    parts = (digits[0:3], digits[3:7], digits[7:11], digits[11:15])
    return f"{root}/{'/'.join(parts)}/L{digits[15:19]}"


_SHORT_PATH = re.compile(r"(\d{2})/(\d{4})/L(\d{4})")
_LONG_PATH = re.compile(r"(\d{3})/(\d{4})/(\d{4})/(\d{4})/L(\d{4})")


def ledger_id_from_path(path: str, root: str = LEDGERS_ROOT) -> int:
    """The ledger id of a ledger znode path; MetadataFormatError if it is not one."""
    relative = path.removeprefix(root + "/") if path.startswith(root + "/") else None
    match = None
    if relative is not None:
        match = _SHORT_PATH.fullmatch(relative) or _LONG_PATH.fullmatch(relative)
    if match is None:
        raise MetadataFormatError(f"{path!r} is not a ledger znode path under {root!r}")
    return int("".join(match.groups()))


# -------------------------------------------------------------------------- ledger id generation


@dataclass(frozen=True, slots=True)
class LedgerIdGenLayout:
    """Where BookKeeper's default id generator (LongZkLedgerIdGenerator) makes ids.

    Short ids: create an EPHEMERAL_SEQUENTIAL znode at `short_prefix` ("/ledgers/idgen/ID-"),
    take the id from its name (`short_ledger_id`), then delete it. When that gives an id
    >= 2^31-1 (LedgerIdOverflowError), switch for good to long ids: create `long_root`
    ("/ledgers/idgen-long"); its existence marks the switch. Long ids: the highest
    "HOB-%010d" child of `long_root` gives the high 32 bits (start at 1, creating
    `hob_path(1)`); a sequential znode under `long_prefix(high)` gives the low 31 bits; when
    those overflow, create `hob_path(high + 1)` and retry.
    """

    root: str = LEDGERS_ROOT

    @property
    def short_prefix(self) -> str:
        return f"{self.root}/idgen/ID-"

    @property
    def long_root(self) -> str:
        return f"{self.root}/idgen-long"

    def hob_path(self, high_bits: int) -> str:
        return f"{self.long_root}/HOB-{high_bits:010d}"

    def long_prefix(self, high_bits: int) -> str:
        return f"{self.hob_path(high_bits)}/ID-"


_SEQUENCE = re.compile(r"-?\d{1,19}")
_HOB_NAME = re.compile(r"HOB-(\d{1,19})")


def short_ledger_id(created_path: str, prefix: str) -> int:
    """The id in a sequential znode created at `prefix` (its suffix, ZooKeeper's counter).

    LedgerIdOverflowError when outside [0, 2^31-1): time to use long ids.
    """
    suffix = created_path.removeprefix(prefix) if created_path.startswith(prefix) else ""
    if not _SEQUENCE.fullmatch(suffix):
        raise MetadataFormatError(f"{created_path!r} is not a sequential znode under {prefix!r}")
    ledger_id = int(suffix)
    if not 0 <= ledger_id < SHORT_ID_LIMIT:
        raise LedgerIdOverflowError(
            f"{created_path!r}: id {ledger_id} is outside [0, {SHORT_ID_LIMIT})"
        )
    return ledger_id


def long_ledger_id(high_bits: int, created_path: str, prefix: str) -> int:
    """(high_bits << 32) | the low id of a sequential znode created at `prefix`."""
    assert 0 < high_bits < (1 << 31), f"high bits out of range: {high_bits}"
    return (high_bits << 32) | short_ledger_id(created_path, prefix)


def hob_high_bits(child_name: str) -> int | None:
    """The high bits a "HOB-0000000001" child of idgen-long stands for; None for other names."""
    match = _HOB_NAME.fullmatch(child_name)
    return None if match is None else int(match.group(1))
