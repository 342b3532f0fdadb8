"""A write proxy's release of drained streams: a release that fails is logged and raised (so
the drain follower shows it, restarting, and tries again), not dropped in silence; the other
drained streams are released all the same. Writers are scripted at the LogWriter seam."""

from __future__ import annotations

import logging
from typing import Any, cast

import pytest

from core.errors import OutcomeUnknownError, OwnerFencedError
from region.idempotence.producers import ProducerTable
from region.idempotence.rebuild import Idempotence
from region.ownership import Owned, Ownership


class ScriptedWriter:
    def __init__(self, failure: Exception | None = None) -> None:
        self.failure = failure
        self.closed = False

    async def close(self) -> None:
        self.closed = True
        if self.failure is not None:
            raise self.failure


def owned(writer: ScriptedWriter) -> Owned:
    async def no_table() -> ProducerTable:
        raise AssertionError("not built in these tests")

    return Owned(cast(Any, writer), 0, Idempotence(no_table))


async def test_a_failed_drain_release_is_logged_and_raised_after_the_others(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ownership = Ownership(cast(Any, None), cast(Any, None), cast(Any, None), cast(Any, None))
    fenced = OwnerFencedError("stream 'a': fenced by a newer owner")
    failing, drained, kept = ScriptedWriter(fenced), ScriptedWriter(), ScriptedWriter()
    ownership._owned = {
        ("ns", "a"): owned(failing),
        ("ns", "b"): owned(drained),
        ("ns", "c"): owned(kept),
    }
    ownership.drained = frozenset({("ns", "a"), ("ns", "b")})
    with (
        caplog.at_level(logging.WARNING, logger="region.ownership"),
        pytest.raises(OwnerFencedError, match="fenced by a newer owner"),
    ):
        await ownership.release_drained()
    assert failing.closed and drained.closed, "every drained stream was tried"
    assert not kept.closed and ownership.owned == [("ns", "c")]
    [warning] = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert "ns/a" in warning.getMessage() and "fenced by a newer owner" in warning.getMessage()


async def test_a_drain_release_that_times_out_is_raised_with_its_outcome_unknown() -> None:
    ownership = Ownership(cast(Any, None), cast(Any, None), cast(Any, None), cast(Any, None))
    ownership._owned = {("ns", "a"): owned(ScriptedWriter(TimeoutError()))}  # its close's bound
    ownership.drained = frozenset({("ns", "a")})
    with pytest.raises(OutcomeUnknownError, match=r"stream ns/a: its writer did not close") as e:
        await ownership.release_drained()
    assert e.value.cause == "timeout"
