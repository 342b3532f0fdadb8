"""A bookie connection upgraded to TLS the way BookKeeper's clients do it (START_TLS).

On a fresh TCP connection the client's first and only request is a v3 START_TLS; the bookie
puts TLS in its pipeline, answers EOK in clear, and waits for the client's handshake on the
same socket. Inside TLS the framing is unchanged, and the connection may go on in v3 or switch
to v2 (batched reads) with its next frame: the bookie fixes the protocol at the first frame
after the upgrade. A bookie without TLS answers EBADREQ; one that authorizes by role answers
the handshake of a client without an authorized certificate with EIO and then EUA to
everything.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable
from typing import TypeVar

from ledger.codecs.frames import LENGTH_PREFIX_BYTES, start_tls_frame
from ledger.codecs.message_codec import decode_start_tls_message
from ledger.codes import StatusCode
from ledger.errors import BookieProtocolError, BookieUnavailableError, ConnectionLostError

START_TLS_TXN_ID = 0  # alone on its connection, before any other request
ANSWER_BYTES_MAX = 1024  # a START_TLS answer is a header and a status: tens of bytes

P = TypeVar("P", bound=asyncio.Protocol)


class _Greeting(asyncio.Protocol):
    """Reads the one frame a bookie answers START_TLS with, and nothing else."""

    def __init__(self, where: str) -> None:
        self._where = where
        self._buffer = bytearray()
        self.answer: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()

    def data_received(self, data: bytes) -> None:
        if self.answer.done():
            return
        self._buffer += data
        if len(self._buffer) < LENGTH_PREFIX_BYTES:
            return
        size = int.from_bytes(self._buffer[:LENGTH_PREFIX_BYTES], "big")
        whole = LENGTH_PREFIX_BYTES + size
        if size > ANSWER_BYTES_MAX or len(self._buffer) > whole:
            self.answer.set_exception(
                BookieProtocolError(
                    f"{self._where}: expected one START_TLS answer of at most "
                    f"{ANSWER_BYTES_MAX} bytes, got a frame of {size} bytes"
                    + (" and more after it" if len(self._buffer) > whole else "")
                )
            )
        elif len(self._buffer) == whole:
            self.answer.set_result(bytes(self._buffer[LENGTH_PREFIX_BYTES:]))

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.answer.done():
            self.answer.set_exception(
                ConnectionLostError(f"{self._where}: closed before answering START_TLS")
            )


async def open_tls(
    host: str,
    port: int,
    context: ssl.SSLContext,
    server_hostname: str,
    make_protocol: Callable[[], P],
    where: str,
) -> P:
    """A connection to `host:port` upgraded to TLS, verified as `server_hostname`, served by
    `make_protocol()` from then on. The caller bounds the time. BookieUnavailableError when
    the bookie refuses TLS or the handshake fails (its certificate is not the deployment's)."""
    loop = asyncio.get_running_loop()
    transport, greeting = await loop.create_connection(lambda: _Greeting(where), host, port)
    try:
        transport.write(start_tls_frame(START_TLS_TXN_ID))
        status = decode_start_tls_message(await greeting.answer, START_TLS_TXN_ID)
        if status is not StatusCode.EOK:
            raise BookieUnavailableError(
                f"{where}: refused START_TLS with {status.name} (does the bookie have "
                "tlsProviderFactoryClass set?)"
            )
        protocol = make_protocol()
        try:
            upgraded = await loop.start_tls(
                transport, protocol, context, server_hostname=server_hostname
            )
        except (ssl.SSLError, ssl.CertificateError) as err:
            raise BookieUnavailableError(f"{where}: TLS handshake failed: {err}") from err
        if upgraded is None:  # the connection closed during the handshake
            raise ConnectionLostError(f"{where}: closed during the TLS handshake")
        protocol.connection_made(upgraded)
        return protocol
    except BaseException:
        transport.abort()
        raise
