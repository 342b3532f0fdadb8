"""A minimal proto2 wire-format codec: a field writer, and a bounded parser into typed lookups.

Only what BookKeeper's messages use: varint scalars (int32, int64, uint32, uint64, enum, bool),
fixed64/fixed32 (skipped or read raw), length-delimited bytes, strings and embedded messages.
Unknown fields (including groups) are skipped. Every malformed input raises ProtocolError:
truncated varints or fields, bad wire types, field number 0, invalid UTF-8, wrong wire type for a
known field, too many bytes, fields or nesting levels. Parsing is a single forward pass over the
input, so it always terminates.

Encoding writes fields in the order the caller gives them; callers give them in field-number
order, as protobuf-java does, so our bytes equal BookKeeper's for the same message.
"""

from __future__ import annotations

import enum
from typing import TypeVar

from ledger.errors import ProtocolError

# Largest message the parser accepts; frames (5 MiB) and znodes (1 MiB) are far below it.
MESSAGE_BYTES_MAX = 16 * 1024 * 1024
# Deepest embedded-message or group nesting accepted; BookKeeper's messages need 3.
NESTING_MAX = 8
# Most fields accepted in one message (a bound on parse work and memory for hostile input).
FIELDS_MAX = 65_536
# A varint is at most 10 bytes (64 bits, 7 per byte).
VARINT_BYTES_MAX = 10

WIRE_VARINT = 0
WIRE_FIXED64 = 1
WIRE_BYTES = 2
WIRE_GROUP_START = 3
WIRE_GROUP_END = 4
WIRE_FIXED32 = 5

_FIXED_WIDTHS = {WIRE_FIXED64: 8, WIRE_FIXED32: 4}

FIELD_NUMBER_MAX = (1 << 29) - 1
_U64 = (1 << 64) - 1
_U32 = (1 << 32) - 1
_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1

E = TypeVar("E", bound=enum.IntEnum)
T = TypeVar("T")


# The varints of 0..127: one byte each (most tags, lengths and enums).
_ONE_BYTE_VARINTS = tuple(bytes((value,)) for value in range(0x80))


def encode_varint(value: int) -> bytes:
    """The varint of an unsigned 64-bit value."""
    if 0 <= value < 0x80:
        return _ONE_BYTE_VARINTS[value]
    assert 0 <= value <= _U64, f"varint value out of range: {value}"
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def decode_varint(data: bytes | memoryview, pos: int, what: str) -> tuple[int, int]:
    """(value, position after it) of the varint at `pos`; ProtocolError if truncated or too long.

    Bits beyond 64 are dropped, as protobuf-java does.
    """
    if pos < len(data) and data[pos] < 0x80:
        return data[pos], pos + 1  # one byte: most tags, lengths and enums
    result = 0
    for index in range(VARINT_BYTES_MAX):
        if pos + index >= len(data):
            raise ProtocolError(f"{what}: truncated varint at byte {pos} of {len(data)}")
        byte = data[pos + index]
        result |= (byte & 0x7F) << (7 * index)
        if byte < 0x80:
            return result & _U64, pos + index + 1
    raise ProtocolError(f"{what}: varint at byte {pos} is longer than {VARINT_BYTES_MAX} bytes")


def _signed64(value: int) -> int:
    return value - (1 << 64) if value & (1 << 63) else value


def _signed32(value: int) -> int:
    value &= _U32
    return value - (1 << 32) if value & (1 << 31) else value


class Writer:
    """Builds one message, field by field, in the order called."""

    __slots__ = ("_out",)

    def __init__(self) -> None:
        self._out = bytearray()

    def _tag(self, field: int, wire_type: int) -> None:
        assert 1 <= field <= FIELD_NUMBER_MAX, f"bad field number {field}"
        self._out += encode_varint((field << 3) | wire_type)

    def uint(self, field: int, value: int) -> Writer:
        """uint32, uint64, or a non-negative enum or bool."""
        self._tag(field, WIRE_VARINT)
        self._out += encode_varint(value)
        return self

    def int64(self, field: int, value: int) -> Writer:
        """int64 or int32 (negative values take 10 bytes, as protobuf-java writes them)."""
        assert _INT64_MIN <= value <= _INT64_MAX, f"int64 out of range: {value}"
        return self.uint(field, value & _U64)

    def binary(self, field: int, value: bytes | bytearray | memoryview) -> Writer:
        self._tag(field, WIRE_BYTES)
        self._out += encode_varint(len(value))
        self._out += value
        return self

    def string(self, field: int, value: str) -> Writer:
        return self.binary(field, value.encode("utf-8"))

    def message(self, field: int, value: Writer) -> Writer:
        return self.binary(field, value._out)

    def finish(self) -> bytes:
        return bytes(self._out)


_Value = int | memoryview


class Fields:
    """The parsed fields of one message; getters check wire types and return None when absent.

    Scalars: the last occurrence wins. Embedded messages: all occurrences are merged (parsed as
    their concatenation), as proto2 specifies.
    """

    __slots__ = ("_depth", "_values", "what")

    def __init__(self, values: dict[int, list[tuple[int, _Value]]], what: str, depth: int) -> None:
        self._values = values
        self.what = what
        self._depth = depth

    def has(self, field: int) -> bool:
        return field in self._values

    def _all(self, field: int, wire_type: int) -> list[_Value]:
        found = self._values.get(field, [])
        for got, _ in found:
            if got != wire_type:
                raise ProtocolError(
                    f"{self.what}: field {field} has wire type {got}; expected {wire_type}"
                )
        return [value for _, value in found]

    def _all_bytes(self, field: int) -> list[memoryview]:
        found = self._all(field, WIRE_BYTES)
        return [value for value in found if isinstance(value, memoryview)]

    def _last_varint(self, field: int) -> int | None:
        found = self._all(field, WIRE_VARINT)
        if not found:
            return None
        value = found[-1]
        assert isinstance(value, int)
        return value

    def uint64(self, field: int) -> int | None:
        return self._last_varint(field)

    def uint32(self, field: int) -> int | None:
        value = self._last_varint(field)
        return None if value is None else value & _U32

    def int64(self, field: int) -> int | None:
        value = self._last_varint(field)
        return None if value is None else _signed64(value)

    def int32(self, field: int) -> int | None:
        value = self._last_varint(field)
        return None if value is None else _signed32(value)

    def enum(self, field: int, enum_class: type[E]) -> E | None:
        value = self.int32(field)
        if value is None:
            return None
        try:
            return enum_class(value)
        except ValueError:
            raise ProtocolError(
                f"{self.what}: field {field} is {value}, not a known {enum_class.__name__}"
            ) from None

    def binary(self, field: int) -> bytes | None:
        found = self._all_bytes(field)
        return None if not found else bytes(found[-1])

    def string(self, field: int) -> str | None:
        raw = self.binary(field)
        return None if raw is None else self._utf8(field, raw)

    def repeated_strings(self, field: int) -> list[str]:
        return [self._utf8(field, bytes(raw)) for raw in self._all_bytes(field)]

    def message(self, field: int, what: str) -> Fields | None:
        found = self._all_bytes(field)
        if not found:
            return None
        data = found[0] if len(found) == 1 else memoryview(b"".join(found))
        return parse(data, what, self._depth + 1)

    def repeated_messages(self, field: int, what: str) -> list[Fields]:
        return [
            parse(raw, f"{what}[{index}]", self._depth + 1)
            for index, raw in enumerate(self._all_bytes(field))
        ]

    def required(self, value: T | None, field: int, name: str) -> T:
        """`value`, or ProtocolError naming the missing required field."""
        if value is None:
            raise ProtocolError(f"{self.what}: required field {name} ({field}) is missing")
        return value

    def _utf8(self, field: int, raw: bytes) -> str:
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as err:
            raise ProtocolError(f"{self.what}: field {field} is not valid UTF-8: {err}") from err


def parse(data: bytes | memoryview, what: str, depth: int = 0) -> Fields:
    """All fields of the message in `data`; `what` names it in error messages."""
    if depth > NESTING_MAX:
        raise ProtocolError(f"{what}: nested deeper than {NESTING_MAX} levels")
    if len(data) > MESSAGE_BYTES_MAX:
        raise ProtocolError(
            f"{what}: message is {len(data)} bytes; the limit is {MESSAGE_BYTES_MAX}"
        )
    view = data if isinstance(data, memoryview) else memoryview(data)
    values: dict[int, list[tuple[int, _Value]]] = {}
    count = 0
    pos = 0
    while pos < len(view):
        count += 1
        if count > FIELDS_MAX:
            raise ProtocolError(f"{what}: more than {FIELDS_MAX} fields")
        field, wire_type, pos = _read_tag(view, pos, what)
        if wire_type == WIRE_GROUP_START:
            pos = _skip_group(view, pos, field, what, depth + 1)
            continue
        value, pos = _read_value(view, pos, wire_type, field, what)
        values.setdefault(field, []).append((wire_type, value))
    return Fields(values, what, depth)


def _read_tag(view: memoryview, pos: int, what: str) -> tuple[int, int, int]:
    tag, pos = decode_varint(view, pos, what)
    field, wire_type = tag >> 3, tag & 7
    if field == 0 or field > FIELD_NUMBER_MAX:
        raise ProtocolError(f"{what}: invalid field number {field} at byte {pos}")
    if wire_type == WIRE_GROUP_END:
        raise ProtocolError(f"{what}: end of group {field} without a start, at byte {pos}")
    if wire_type > WIRE_FIXED32:
        raise ProtocolError(f"{what}: invalid wire type {wire_type} at byte {pos}")
    return field, wire_type, pos


def _read_value(
    view: memoryview, pos: int, wire_type: int, field: int, what: str
) -> tuple[_Value, int]:
    if wire_type == WIRE_VARINT:
        return decode_varint(view, pos, what)
    width = _FIXED_WIDTHS.get(wire_type)
    if width is None:
        width, pos = decode_varint(view, pos, what)
    end = pos + width
    if end > len(view):
        raise ProtocolError(
            f"{what}: field {field} needs {width} bytes at byte {pos}; "
            f"only {len(view) - pos} remain"
        )
    if wire_type == WIRE_BYTES:
        return view[pos:end], end
    return int.from_bytes(view[pos:end], "little"), end


def _skip_group(view: memoryview, pos: int, group: int, what: str, depth: int) -> int:
    """Position after the end tag of group `group` whose start tag ended at `pos`."""
    if depth > NESTING_MAX:
        raise ProtocolError(f"{what}: groups nested deeper than {NESTING_MAX} levels")
    while pos < len(view):
        tag, pos = decode_varint(view, pos, what)
        field, wire_type = tag >> 3, tag & 7
        if wire_type == WIRE_GROUP_END:
            if field != group:
                raise ProtocolError(f"{what}: group {group} closed by end of group {field}")
            return pos
        if field == 0 or wire_type > WIRE_FIXED32:
            raise ProtocolError(f"{what}: invalid tag {tag} inside group {group}")
        if wire_type == WIRE_GROUP_START:
            pos = _skip_group(view, pos, field, what, depth + 1)
        else:
            _, pos = _read_value(view, pos, wire_type, field, what)
    raise ProtocolError(f"{what}: group {group} is not closed before the end of the message")
