"""Errors as HTTP answers: JSON {"code", "message", "retriable", "outcome"}, each code with the
status, retriable flag and outcome of core/answers.py's table (docs/http-api.md, "Errors").

A proxy answers only the table's codes. An error of the code whose own code is not in the
table is answered by its family: a metadata (ZooKeeper) failure as `metadata_unavailable`, a
bookie, ledger or placement failure as `storage_unavailable`, anything else as `internal`
(a bug); the message starts with the error's own code. `retriable` at the proxy may differ
from the library class's: a fenced or failed writer is replaced on the next request, so those
are retriable here although the library's writer object that raised them is finished.

A write whose writer failed after accepting it is answered `outcome_unknown` (see
`OutcomeUnknownError`), whatever the failure: it may have been appended.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from core import errors
from core.answers import ANSWERS
from ledger import errors as ledger_errors
from placement.errors import PlacementError
from region.observability.telemetry import ERROR_CODE

log = logging.getLogger(__name__)

# Errors of the storage below a proxy (bookies, ledgers, placement of their copies).
STORAGE_ERRORS: tuple[type[errors.GlobelogError], ...] = (
    ledger_errors.ProtocolError,
    ledger_errors.FrameTooLargeError,
    ledger_errors.DigestMismatchError,
    ledger_errors.LedgerIdOverflowError,
    ledger_errors.BookieError,
    ledger_errors.BookieConnectionError,
    ledger_errors.ClientClosedError,
    ledger_errors.PoolFullError,
    ledger_errors.BookieUnreachableError,
    ledger_errors.LedgerHandleError,
    ledger_errors.LedgerExistsError,
    ledger_errors.NoSuchLedgerMetadataError,
    ledger_errors.LedgerMetadataConflictError,
    PlacementError,
)


def answered_code(err: errors.GlobelogError) -> str:
    """The table's code a proxy answers `err` with."""
    if err.code in ANSWERS:
        return err.code
    if isinstance(err, errors.MetadataError):
        return errors.MetadataUnavailableError.code
    if isinstance(err, STORAGE_ERRORS):
        return errors.StorageUnavailableError.code
    return errors.GlobelogError.code


def error_body(code: str, message: str, extra: dict[str, Any] | None = None) -> bytes:
    answer = ANSWERS[code]
    body = {"code": code, "message": message, "retriable": answer.retriable}
    body["outcome"] = answer.outcome
    return json.dumps({**body, **(extra or {})}).encode()


def error_response(err: errors.GlobelogError) -> web.Response:
    code = answered_code(err)
    message = str(err) if code == err.code else f"{err.code}: {err}"
    extra = {"cause": err.cause} if isinstance(err, errors.OutcomeUnknownError) else None
    if code == errors.GlobelogError.code:
        log.error("answered internal for %s: %s", type(err).__name__, err, exc_info=err)
    response = _json_error(code, error_body(code, message, extra))
    if isinstance(err, errors.QuotaExceededError):
        # whole seconds (RFC 9110), rounded up: a client that waits it is let in
        response.headers["Retry-After"] = str(max(0, math.ceil(err.retry_after_s)))
    if isinstance(err, errors.UnauthenticatedError):
        response.headers["WWW-Authenticate"] = 'Bearer realm="globelog"'  # RFC 6750
    return response


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
    return _json_error(code, error_body(code, message))


def _json_error(code: str, body: bytes) -> web.Response:
    response = web.Response(status=ANSWERS[code].status, body=body, content_type="application/json")
    response[ERROR_CODE] = code
    return response


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
    except Exception as err:  # a bug: answered in the documented form, and logged
        log.error("%s %s failed", request.method, request.path, exc_info=err)
        message = f"{type(err).__name__}: {err}"
        return _json_error("internal", error_body("internal", message))


def json_response(body: Any, status: int = 200) -> web.Response:
    return web.Response(
        status=status, body=json.dumps(body).encode(), content_type="application/json"
    )
