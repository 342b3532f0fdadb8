"""Errors as HTTP answers: JSON {"code", "message", "retriable"} with a status per code.

`retriable` is whether the client may send the same request again: at the proxy a fenced or
failed writer is replaced on the next request, so those are retriable there even though the
library's writer object that raised them is finished.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from core import errors

STATUS_BY_CODE = {
    errors.BadRequestError.code: 400,
    errors.InvalidDlsnError.code: 400,
    errors.InvalidStreamNameError.code: 400,
    errors.InvalidRecordError.code: 400,
    errors.TxidOutOfOrderError.code: 400,
    errors.RecordTooLargeError.code: 413,
    errors.StreamNotFoundError.code: 404,
    errors.StreamExistsError.code: 409,
    errors.OwnershipError.code: 409,
    errors.EndOfStreamError.code: 409,
    errors.SeqMismatchError.code: 409,
    errors.ProducerSeqStaleError.code: 409,
    errors.ProducerSeqInFlightError.code: 409,
    errors.SessionFencedError.code: 409,
    errors.TruncatedPositionError.code: 410,
    errors.OverCapacityError.code: 429,
    errors.OwnerFencedError.code: 503,
    errors.WriteFailedError.code: 503,
    errors.WriterClosedError.code: 503,
    errors.OwnerUnreachableError.code: 503,
    errors.MetadataUnavailableError.code: 503,
}
RETRIABLE_AT_THE_PROXY = {
    errors.OwnerFencedError.code,
    errors.WriteFailedError.code,
    errors.WriterClosedError.code,
}


def error_body(code: str, message: str, retriable: bool) -> bytes:
    return json.dumps({"code": code, "message": message, "retriable": retriable}).encode()


def error_response(err: errors.GlobelogError) -> web.Response:
    status = STATUS_BY_CODE.get(err.code, 500)
    retriable = err.retriable or err.code in RETRIABLE_AT_THE_PROXY
    return web.Response(
        status=status,
        body=error_body(err.code, str(err), retriable),
        content_type="application/json",
    )


def http_error_response(err: web.HTTPException, path: str) -> web.Response:
    """aiohttp's own refusals (unknown path, wrong method, body too large) in globelog's form."""
    code = {404: "not_found", 405: "method_not_allowed", 413: "request_too_large"}.get(
        err.status, "bad_request"
    )
    message = f"{err.reason} for {path!r}"
    if err.status == 405 and isinstance(err, web.HTTPMethodNotAllowed):
        message += f"; expected one of {sorted(err.allowed_methods)}"
    if err.status == 413:
        message = f"request body too large for {path!r}: {err.text}"
    return web.Response(
        status=err.status, body=error_body(code, message, False), content_type="application/json"
    )


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every error a handler raises, and aiohttp's own refusals, as globelog's JSON errors."""
    try:
        return await handler(request)
    except errors.GlobelogError as err:
        return error_response(err)
    except web.HTTPException as err:
        if err.status < 400:
            raise
        return http_error_response(err, request.path)


def json_response(body: Any, status: int = 200) -> web.Response:
    return web.Response(
        status=status, body=json.dumps(body).encode(), content_type="application/json"
    )
