"""The binary body of a bulk write: many records in one request, no JSON per record.

    magic "GLB1" | record count u32 | count x (payload length u32 | payload)

Big-endian. Every length is checked against the bytes present and the limits, so a truncated
or foreign body gives BadRequestError naming what was received and what was expected.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from core.errors import BadRequestError, RecordTooLargeError
from core.records import RECORD_BYTES_MAX

MAGIC = b"GLB1"
CONTENT_TYPE = "application/x-globelog-batch"
_HEADER = struct.Struct(">4sI")
_LENGTH = struct.Struct(">I")
BATCH_RECORDS_MAX = 100_000


def encode_batch(payloads: Sequence[bytes]) -> bytes:
    parts = [_HEADER.pack(MAGIC, len(payloads))]
    for payload in payloads:
        parts.append(_LENGTH.pack(len(payload)))
        parts.append(payload)
    return b"".join(parts)


def decode_batch(body: bytes) -> list[bytes]:
    """The payloads of a batch body; the first problem found raises, naming it."""
    if len(body) < _HEADER.size:
        raise BadRequestError(
            f"batch body is {len(body)} bytes; expected at least the {_HEADER.size}-byte header "
            f"({MAGIC.decode()} and a record count)"
        )
    magic, count = _HEADER.unpack_from(body)
    if magic != MAGIC:
        raise BadRequestError(f"batch body starts with {magic!r}; expected {MAGIC!r}")
    if not 1 <= count <= BATCH_RECORDS_MAX:
        raise BadRequestError(f"batch declares {count} records; expected 1..{BATCH_RECORDS_MAX}")
    view = memoryview(body)
    offset = _HEADER.size
    payloads = []
    for index in range(count):
        if offset + _LENGTH.size > len(body):
            raise BadRequestError(
                f"batch ends inside the length of record {index} of {count} "
                f"(at byte {offset} of {len(body)})"
            )
        (length,) = _LENGTH.unpack_from(body, offset)
        offset += _LENGTH.size
        if length > RECORD_BYTES_MAX:
            raise RecordTooLargeError(
                f"batch record {index} is {length} bytes; the limit is {RECORD_BYTES_MAX}"
            )
        if offset + length > len(body):
            raise BadRequestError(
                f"batch record {index} declares {length} bytes but only {len(body) - offset} remain"
            )
        payloads.append(bytes(view[offset : offset + length]))
        offset += length
    if offset != len(body):
        raise BadRequestError(
            f"batch has {len(body) - offset} bytes after its {count} records; expected none"
        )
    return payloads
