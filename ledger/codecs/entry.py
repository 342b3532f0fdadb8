"""Entry and explicit-LAC packets with their digests, and the master key of a ledger password.

An entry packet (what AddRequest.body carries and ReadResponse.body returns) is
    ledger_id:i64 | entry_id:i64 | lac:i64 | length:i64 | digest | payload      (big-endian)
where `lac` is the writer's LAC when it sent the entry and `length` the ledger's byte length
including this entry. An explicit-LAC packet (WriteLacRequest.body, ReadLacResponse.lacBody) is
    ledger_id:i64 | lac:i64 | digest
The digest covers the header and the payload (everything except the digest itself):
    CRC32   8 bytes: the CRC-32 value as a big-endian long (upper 4 bytes zero)
    CRC32C  4 bytes: the CRC-32C value as a big-endian int
    HMAC   20 bytes: HMAC-SHA1 keyed with SHA1(b"mac" + password)
    DUMMY   0 bytes
(BookKeeper: proto/checksum/DigestManager.java and its subclasses.)
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import crc32c as _crc32c

from ledger.errors import DigestMismatchError

ENTRY_HEADER_BYTES = 32  # DigestManager.METADATA_LENGTH
LAC_HEADER_BYTES = 16  # DigestManager.LAC_METADATA_LENGTH
MASTER_KEY_BYTES = 20  # a SHA-1 digest

_ENTRY_HEADER = struct.Struct(">qqqq")
_LAC_HEADER = struct.Struct(">qq")
_CRC32C_DIGEST = struct.Struct(">I")


class DigestType(enum.IntEnum):
    """LedgerMetadataFormat.DigestType numbers (DataFormats.proto); HMAC is the API's MAC."""

    CRC32 = 1
    HMAC = 2
    CRC32C = 3
    DUMMY = 4


DIGEST_BYTES: dict[DigestType, int] = {
    DigestType.CRC32: 8,
    DigestType.HMAC: 20,
    DigestType.CRC32C: 4,
    DigestType.DUMMY: 0,
}


def master_key(password: bytes) -> bytes:
    """The 20-byte key bookies check on adds and fencing: SHA1(b"ledger" + password).

    (DigestManager.generateMasterKey; for an empty password BookKeeper uses the constant
    SHA1(b"ledger"), which is the same value.)
    """
    return hashlib.sha1(b"ledger" + password).digest()


# Typed adapter over the untyped crc32c package: crc32c(data, value) continues the CRC-32C
# `value` over `data`. The function itself, not a wrapper: it runs twice per entry.
_crc32c_update = cast(Callable[[bytes | memoryview, int], int], _crc32c.crc32c)


@dataclass(frozen=True, slots=True)
class Entry:
    """A verified entry packet."""

    ledger_id: int
    entry_id: int
    lac: int  # the writer's LAC piggybacked on this entry
    length: int  # the ledger's length in bytes up to and including this entry
    payload: bytes


class EntryCodec:
    """Packs and verifies the entry and explicit-LAC packets of one ledger."""

    __slots__ = ("_crc32c", "_hmac_key", "digest_bytes", "digest_type", "ledger_id")

    def __init__(self, ledger_id: int, digest_type: DigestType, password: bytes) -> None:
        self.ledger_id = ledger_id
        self.digest_type = digest_type
        self.digest_bytes = DIGEST_BYTES[digest_type]
        # CRC32C, the usual digest, is inlined in the per-entry methods.
        self._crc32c = digest_type == DigestType.CRC32C
        self._hmac_key = hashlib.sha1(b"mac" + password).digest()

    def _digest(self, header: bytes, payload: bytes) -> bytes:
        match self.digest_type:
            case DigestType.CRC32C:
                value = _crc32c_update(payload, _crc32c_update(header, 0))
                return value.to_bytes(4, "big")
            case DigestType.CRC32:
                return zlib.crc32(payload, zlib.crc32(header)).to_bytes(8, "big")
            case DigestType.HMAC:
                mac = hmac.new(self._hmac_key, header, hashlib.sha1)
                mac.update(payload)
                return mac.digest()
            case DigestType.DUMMY:
                return b""

    def encode_entry(self, entry_id: int, lac: int, length: int, payload: bytes) -> bytes:
        """The entry packet to put in AddRequest.body."""
        header = _ENTRY_HEADER.pack(self.ledger_id, entry_id, lac, length)
        if self._crc32c:
            crc = _crc32c_update(payload, _crc32c_update(header, 0))
            return b"".join((header, _CRC32C_DIGEST.pack(crc), payload))
        return b"".join((header, self._digest(header, payload), payload))

    def decode_entry(self, packet: bytes, entry_id: int) -> Entry:
        """The entry in `packet`, which must be entry `entry_id` of this ledger.

        DigestMismatchError if the packet is short, its digest is wrong, or its ids differ.
        """
        return self._verify(packet, entry_id)

    def decode_last_entry(self, packet: bytes) -> Entry:
        """A bookie's last entry (a read of entry -1): any entry id of this ledger is accepted."""
        return self._verify(packet, None)

    def _verify(self, packet: bytes, entry_id: int | None) -> Entry:
        body_start = ENTRY_HEADER_BYTES + self.digest_bytes
        if len(packet) < body_start:
            raise DigestMismatchError(
                f"{self._where(entry_id)}: packet is {len(packet)} bytes; a "
                f"{self.digest_type.name} entry needs at least {body_start}"
            )
        header = packet[:ENTRY_HEADER_BYTES]
        payload = bytes(packet[body_start:])  # one copy: bytes() keeps a bytes slice as it is
        if self._crc32c:
            # A CRC is no secret: a plain comparison of the values is enough.
            crc = _crc32c_update(payload, _crc32c_update(header, 0))
            matches = crc == _CRC32C_DIGEST.unpack_from(packet, ENTRY_HEADER_BYTES)[0]
        else:
            digest = self._digest(bytes(header), payload)
            matches = hmac.compare_digest(digest, packet[ENTRY_HEADER_BYTES:body_start])
        if not matches:
            raise DigestMismatchError(
                f"{self._where(entry_id)}: {self.digest_type.name} digest does not match"
            )
        got_ledger, got_entry, lac, length = _ENTRY_HEADER.unpack_from(packet)
        if got_ledger != self.ledger_id:
            raise DigestMismatchError(f"{self._where(entry_id)}: packet is of ledger {got_ledger}")
        if entry_id is not None and got_entry != entry_id:
            raise DigestMismatchError(f"{self._where(entry_id)}: packet is of entry {got_entry}")
        return Entry(got_ledger, got_entry, lac, length, payload)

    def _where(self, entry_id: int | None) -> str:
        """Names the entry in errors (built only on failure: verification is per entry)."""
        return f"ledger {self.ledger_id} entry {'(last)' if entry_id is None else entry_id}"

    def encode_lac(self, lac: int) -> bytes:
        """The explicit-LAC packet to put in WriteLacRequest.body."""
        header = _LAC_HEADER.pack(self.ledger_id, lac)
        return header + self._digest(header, b"")

    def decode_lac(self, packet: bytes) -> int:
        """The LAC in an explicit-LAC packet (ReadLacResponse.lacBody); DigestMismatchError if bad
        (short, another ledger's, or a wrong digest).

        Bytes after the digest are ignored, as BookKeeper does.
        """
        where = f"ledger {self.ledger_id} explicit LAC"
        end = LAC_HEADER_BYTES + self.digest_bytes
        if len(packet) < end:
            raise DigestMismatchError(
                f"{where}: packet is {len(packet)} bytes; a {self.digest_type.name} LAC "
                f"needs at least {end}"
            )
        header = bytes(packet[:LAC_HEADER_BYTES])
        if not hmac.compare_digest(self._digest(header, b""), packet[LAC_HEADER_BYTES:end]):
            raise DigestMismatchError(f"{where}: {self.digest_type.name} digest does not match")
        got_ledger, lac = _LAC_HEADER.unpack(header)
        if got_ledger != self.ledger_id:
            raise DigestMismatchError(f"{where}: packet is of ledger {got_ledger}")
        assert isinstance(lac, int)
        return lac
