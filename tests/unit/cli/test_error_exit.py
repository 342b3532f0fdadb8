"""A command's error says what happened and exits by what the caller may assume: 4 when a
write's outcome is unknown (it may have been appended), 1 when it certainly failed."""

from __future__ import annotations

import pytest

from cli.main import EXIT_OUTCOME_UNKNOWN, report_error
from core.errors import OutcomeUnknownError, SeqMismatchError

pytestmark = pytest.mark.unit


def test_an_unknown_outcome_exits_4_and_says_the_write_may_have_landed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    error = OutcomeUnknownError("POST .../records may have been appended: ...", "owner_fenced")
    assert report_error(error, None) == EXIT_OUTCOME_UNKNOWN == 4
    err = capsys.readouterr().err
    assert err.startswith("globelog: error [outcome_unknown]: POST .../records may have been")
    assert "may or may not have been appended" in err and "read the stream" in err


def test_a_definite_failure_exits_1_without_that_advice(capsys: pytest.CaptureFixture[str]) -> None:
    assert report_error(SeqMismatchError("the next one is 4"), None) == 1
    err = capsys.readouterr().err
    assert err == "globelog: error [seq_mismatch]: the next one is 4\n"
