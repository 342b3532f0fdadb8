"""The shared vocabulary of the ledger state machines: failure kinds and the outbox."""

from __future__ import annotations

import pytest

from ledger import errors
from ledger.codes import StatusCode
from ledger.machines.signals import BookieFailure, Outbox, failure_kind

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (errors.FencedError("x"), BookieFailure.FENCED),
        (errors.UnauthorizedError("x"), BookieFailure.UNAUTHORIZED),
        (errors.ReadOnlyError("x"), BookieFailure.READ_ONLY),
        (errors.NoSuchLedgerError("x"), BookieFailure.NO_SUCH_LEDGER),
        (errors.NoSuchEntryError("x"), BookieFailure.NO_SUCH_ENTRY),
        (errors.DigestMismatchError("x"), BookieFailure.DIGEST_MISMATCH),
        (errors.BookieIOError("x"), BookieFailure.OTHER),
        (errors.TooManyRequestsError("x"), BookieFailure.OTHER),
        (errors.BookieTimeoutError("x"), BookieFailure.TIMEOUT),
        (errors.BookieUnavailableError("x"), BookieFailure.BOOKIE_DOWN),
        (errors.ConnectionLostError("x"), BookieFailure.BOOKIE_DOWN),
        (errors.BookieProtocolError("x"), BookieFailure.BOOKIE_DOWN),
        (TimeoutError(), BookieFailure.TIMEOUT),
        (ConnectionRefusedError(), BookieFailure.BOOKIE_DOWN),
        (ValueError(), BookieFailure.OTHER),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, BaseException) else v.value,
)
def test_failure_kind(error: BaseException, kind: BookieFailure) -> None:
    assert failure_kind(error) is kind


def test_every_bookie_status_has_a_kind() -> None:
    for status in StatusCode:
        error = errors.status_error(status, "read entry 3")
        if error is not None:
            assert isinstance(failure_kind(error), BookieFailure)
    fenced = errors.status_error(StatusCode.EFENCED, "add entry 3")
    assert fenced is not None and failure_kind(fenced) is BookieFailure.FENCED


def test_only_denials_hold_nothing() -> None:
    assert {k for k in BookieFailure if k.holds_nothing} == {
        BookieFailure.NO_SUCH_LEDGER,
        BookieFailure.NO_SUCH_ENTRY,
    }


def test_the_outbox_refuses_actions_after_it_is_sealed() -> None:
    outbox: Outbox[str] = Outbox()
    outbox.emit("send")
    assert outbox.take() == ["send"] and outbox.take() == []
    outbox.seal()
    with pytest.raises(AssertionError, match="after the terminal state"):
        outbox.emit("late")
