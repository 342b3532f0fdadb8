"""The bookie connection's framing: each message is a 4-byte big-endian length, then that many
bytes of a protobuf message. Encoders give whole frames; decoders take bytes as they arrive.

BookKeeper reads frames with Netty's LengthFieldBasedFrameDecoder(maxFrameLength, 0, 4, 0, 4):
the length counts the body only; the bound (nettyMaxFrameSizeBytes, 5 MiB by default) counts the
body plus the 4 length bytes. A bookie starts each connection in v3 mode and falls back to v2
for good if the first frame does not parse as a v3 Request; with authentication disabled (the
default) no handshake is needed before the first request.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Generic, TypeVar

from ledger.codecs.message_codec import (
    add_request_parts,
    decode_request_message,
    decode_response_message,
    encode_request_message,
    encode_response_message,
    encode_start_tls_message,
)
from ledger.codecs.messages import AddRequest, Request, Response
from ledger.errors import FrameTooLargeError, ProtocolError

# BookKeeper's default nettyMaxFrameSizeBytes: the largest frame, length prefix included.
FRAME_BYTES_MAX = 5 * 1024 * 1024
LENGTH_PREFIX_BYTES = 4
_LENGTH_PREFIX = struct.Struct(">I")

M = TypeVar("M")


def frame(message: bytes, frame_bytes_max: int = FRAME_BYTES_MAX) -> bytes:
    """`message` with its length prefix; FrameTooLargeError if a bookie would refuse it."""
    size = LENGTH_PREFIX_BYTES + len(message)
    if size > frame_bytes_max:
        raise FrameTooLargeError(f"frame is {size} bytes; the limit is {frame_bytes_max}")
    return len(message).to_bytes(LENGTH_PREFIX_BYTES, "big") + message


def start_tls_frame(txn_id: int) -> bytes:
    """The START_TLS request's frame (the only request sent before TLS starts)."""
    return frame(encode_start_tls_message(txn_id))


def encode_request(request: Request, frame_bytes_max: int = FRAME_BYTES_MAX) -> bytes:
    """The whole frame (length prefix and Request) to send to a bookie."""
    return frame(encode_request_message(request), frame_bytes_max)


class AddFrames:
    """The frames of one entry's AddRequest for any txn id: the requests of an entry to its
    write quorum differ only in BKPacketHeader.txnId.

    A Request serializes as its fields in field-number order, so it is the concatenation of a
    Request holding only its header (field 1) and one holding only its addRequest (field 101).
    The second, which carries the entry, is serialized once per entry; per bookie only the
    header is. `pieces(txn_id)` gives (length prefix, header field, addRequest field): the bytes
    of `encode_request` of the AddRequest with that txn id. The caller checks the frame bound.
    """

    __slots__ = ("_add", "_header", "_header_message")

    def __init__(self, request: AddRequest) -> None:
        self._header_message, self._add = add_request_parts(request)
        self._header = self._header_message.header

    def pieces(self, txn_id: int) -> tuple[bytes, bytes, bytes]:
        self._header.txnId = txn_id
        header = self._header_message.SerializeToString()
        return _LENGTH_PREFIX.pack(len(header) + len(self._add)), header, self._add


def encode_response(response: Response, frame_bytes_max: int = FRAME_BYTES_MAX) -> bytes:
    """The whole frame a bookie sends for `response` (for fakes and tests)."""
    return frame(encode_response_message(response), frame_bytes_max)


class Deframer(Generic[M]):
    """Splits a byte stream into frames and parses each; fails for good on the first bad frame."""

    def __init__(self, parse: Callable[[memoryview], M], what: str, frame_bytes_max: int) -> None:
        assert frame_bytes_max > LENGTH_PREFIX_BYTES, "the frame bound must exceed the prefix"
        self._parse = parse
        self._what = what
        self._frame_bytes_max = frame_bytes_max
        self._buffer = bytearray()
        self._failed: ProtocolError | None = None

    @property
    def buffered_bytes(self) -> int:
        """Bytes received but not yet part of a complete frame."""
        return len(self._buffer)

    def feed(self, data: bytes) -> list[M]:
        """The messages completed by `data`, in order; a partial frame waits for more bytes.

        ProtocolError on an oversize or unparseable frame. The stream cannot be resynchronised
        after that, so every later call raises it again: close the connection.
        """
        if self._failed is not None:
            raise self._failed
        try:
            frames: bytes | bytearray = data
            if self._buffer or type(data) is not bytes:
                self._buffer += data
                if self._frame_end(self._buffer, 0) < 0:
                    return []
                # At least one whole frame: parse in place in the buffer, which is handed over
                # (and so never resized under a view of it); a new one takes any remainder.
                frames, self._buffer = self._buffer, bytearray()
            return self._drain(frames)
        except ProtocolError as err:
            self._failed = err
            self._buffer.clear()
            raise

    def _frame_end(self, data: bytes | bytearray, start: int) -> int:
        """The end of the frame at `start` in `data`, or -1 if its bytes have not all arrived;
        ProtocolError if its length prefix announces more than the bound."""
        if len(data) - start < LENGTH_PREFIX_BYTES:
            return -1
        length: int = _LENGTH_PREFIX.unpack_from(data, start)[0]
        if length + LENGTH_PREFIX_BYTES > self._frame_bytes_max:
            raise ProtocolError(
                f"{self._what}: frame of {length + LENGTH_PREFIX_BYTES} bytes announced; "
                f"the limit is {self._frame_bytes_max}"
            )
        end = start + LENGTH_PREFIX_BYTES + length
        return end if end <= len(data) else -1

    def _drain(self, data: bytes | bytearray) -> list[M]:
        """Parses the whole frames in `data` through views of it, without copying them, and
        buffers the incomplete frame after them. Nothing may resize `data` while views of it
        live: it is immutable bytes, or a buffer this decoder no longer holds."""
        messages: list[M] = []
        view = memoryview(data)
        start = 0
        while (end := self._frame_end(data, start)) >= 0:
            messages.append(self._parse(view[start + LENGTH_PREFIX_BYTES : end]))
            start = end
        if start < len(data):
            self._buffer += view[start:]
        return messages


class FrameDecoder(Deframer[Response]):
    """Bookie → client: bytes in, Responses out."""

    def __init__(self, frame_bytes_max: int = FRAME_BYTES_MAX) -> None:
        super().__init__(decode_response_message, "response stream", frame_bytes_max)


class RequestFrameDecoder(Deframer[Request]):
    """Client → bookie: bytes in, Requests out (for fake bookies and tests)."""

    def __init__(self, frame_bytes_max: int = FRAME_BYTES_MAX) -> None:
        super().__init__(decode_request_message, "request stream", frame_bytes_max)
