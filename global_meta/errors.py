"""Translates kazoo's exceptions into globelog's metadata errors, in one table."""

from __future__ import annotations

from kazoo import exceptions as kz

from core import errors

_TABLE: tuple[tuple[type[Exception], type[errors.MetadataError], str], ...] = (
    (kz.NoNodeError, errors.NoNodeError, "no such node"),
    (kz.NodeExistsError, errors.NodeExistsError, "node already exists"),
    (kz.BadVersionError, errors.BadVersionError, "version changed since it was read"),
    (kz.NotEmptyError, errors.NotEmptyError, "node has children"),
    (kz.SessionExpiredError, errors.SessionExpiredError, "session expired"),
    (kz.ConnectionLoss, errors.MetadataUnavailableError, "connection to ZooKeeper lost"),
    (kz.OperationTimeoutError, errors.MetadataUnavailableError, "operation timed out"),
    (kz.ConnectionClosedError, errors.MetadataUnavailableError, "connection closed"),
    (kz.SessionMovedError, errors.MetadataUnavailableError, "session moved"),
    (kz.NoAuthError, errors.MetadataError, "not authorised"),
)


def translate(err: BaseException, operation: str, path: str) -> errors.MetadataError:
    """The globelog error for a kazoo (or timeout) failure of `operation` on `path`."""
    for foreign, ours, meaning in _TABLE:
        if isinstance(err, foreign):
            return ours(f"{operation} {path!r}: {meaning}")
    if isinstance(err, TimeoutError):
        return errors.MetadataUnavailableError(f"{operation} {path!r}: no answer in time")
    return errors.MetadataError(f"{operation} {path!r}: {type(err).__name__}: {err}")
