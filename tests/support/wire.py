"""Raw protobuf wire bytes for tests: messages built field by field in any order, with any wire
type, so tests can send what the schema-driven encoder never writes (missing required fields,
unknown enum values, wrong wire types, unusual field orders)."""

from __future__ import annotations

from ledger.codecs.varint import encode_varint

WIRE_VARINT = 0
WIRE_FIXED64 = 1
WIRE_BYTES = 2
WIRE_GROUP_START = 3
WIRE_GROUP_END = 4
WIRE_FIXED32 = 5
_U64 = (1 << 64) - 1


class Writer:
    """Builds one message, field by field, in the order called."""

    __slots__ = ("_out",)

    def __init__(self) -> None:
        self._out = bytearray()

    def tag(self, field: int, wire_type: int) -> Writer:
        self._out += encode_varint((field << 3) | wire_type)
        return self

    def raw(self, data: bytes) -> Writer:
        self._out += data
        return self

    def uint(self, field: int, value: int) -> Writer:
        """uint32, uint64, or a non-negative enum or bool."""
        self.tag(field, WIRE_VARINT)
        self._out += encode_varint(value)
        return self

    def int64(self, field: int, value: int) -> Writer:
        """int64 or int32 (negative values take 10 bytes, as protobuf-java writes them)."""
        return self.uint(field, value & _U64)

    def binary(self, field: int, value: bytes | bytearray | memoryview) -> Writer:
        self.tag(field, WIRE_BYTES)
        self._out += encode_varint(len(value))
        self._out += value
        return self

    def string(self, field: int, value: str) -> Writer:
        return self.binary(field, value.encode("utf-8"))

    def message(self, field: int, value: Writer) -> Writer:
        return self.binary(field, value._out)

    def finish(self) -> bytes:
        return bytes(self._out)
