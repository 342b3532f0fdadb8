"""The protobuf varint, for the one place globelog needs it outside a message: the length that
prefixes ledger metadata (protobuf's writeDelimitedTo), which the protobuf package does not
expose."""

from __future__ import annotations

from ledger.errors import ProtocolError

VARINT_BYTES_MAX = 10  # 64 bits, 7 per byte
_U64 = (1 << 64) - 1


def encode_varint(value: int) -> bytes:
    """The varint of an unsigned 64-bit value."""
    assert 0 <= value <= _U64, f"varint value out of range: {value}"
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def decode_varint(data: bytes | memoryview, pos: int, what: str) -> tuple[int, int]:
    """(value, position after it) of the varint at `pos`; ProtocolError if truncated or longer
    than 10 bytes. Bits beyond 64 are dropped, as protobuf does."""
    result = 0
    for index in range(VARINT_BYTES_MAX):
        if pos + index >= len(data):
            raise ProtocolError(f"{what}: truncated varint at byte {pos} of {len(data)}")
        byte = data[pos + index]
        result |= (byte & 0x7F) << (7 * index)
        if byte < 0x80:
            return result & _U64, pos + index + 1
    raise ProtocolError(f"{what}: varint at byte {pos} is longer than {VARINT_BYTES_MAX} bytes")
