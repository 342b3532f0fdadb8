"""RollRequested: a writer asked to leave its open segment (a bookie of its ensemble is
leaving) rolls once what is in flight is acknowledged; an empty segment stays."""

from __future__ import annotations

import pytest

from core.errors import WriterClosedError
from core.records import Record
from core.streams import StreamSettings
from writer.events import (
    CloseSegment,
    EntryAcked,
    RollRequested,
    RollSegment,
    SegmentStarted,
    TransmitEntry,
)
from writer.state import LogWriterState, Phase, SegmentStart

pytestmark = pytest.mark.unit

NOW_MS = 1_700_000_000_000


def machine() -> LogWriterState:
    settings = StreamSettings(buffer_bytes=1000, segment_roll_s=3600.0)
    return LogWriterState("s", settings, SegmentStart(1, 0, -1), now_s=0.0)


def test_a_requested_roll_waits_for_the_entry_in_flight_then_rolls_once() -> None:
    state = machine()
    state.write(Record(b"a"), NOW_MS)
    state.flush()
    (entry,) = [a for a in state.take_actions() if isinstance(a, TransmitEntry)]
    state.handle(RollRequested())
    assert not any(isinstance(a, RollSegment) for a in state.take_actions())  # in flight
    state.handle(EntryAcked(entry.transmit_id, 0))
    rolls = [a for a in state.take_actions() if isinstance(a, RollSegment)]
    assert [r.summary.record_count for r in rolls] == [1]
    state.handle(RollRequested())  # asked again while rolling: nothing more
    assert not any(isinstance(a, RollSegment) for a in state.take_actions())
    # writes accepted meanwhile go into the next segment
    state.write(Record(b"b"), NOW_MS)
    state.handle(SegmentStarted(2, 1, 1.0))
    state.flush()
    (second,) = [a for a in state.take_actions() if isinstance(a, TransmitEntry)]
    assert second.first_position == 0 and state.phase is Phase.OPEN


def test_an_empty_segment_is_not_rolled() -> None:
    state = machine()
    state.handle(RollRequested())
    assert state.take_actions() == [] and state.phase is Phase.OPEN


def test_a_write_after_close_is_refused_while_a_roll_is_under_way() -> None:
    state = machine()
    state.write(Record(b"a"), NOW_MS)
    state.flush()
    (entry,) = [a for a in state.take_actions() if isinstance(a, TransmitEntry)]
    state.handle(RollRequested())
    state.handle(EntryAcked(entry.transmit_id, 0))
    assert state.phase is Phase.ROLLING
    state.close()
    with pytest.raises(WriterClosedError):
        state.write(Record(b"late"), NOW_MS)
    with pytest.raises(WriterClosedError):
        state.check_batch([b"late"])
    # nothing was buffered: once the next segment starts, the writer closes it empty
    state.handle(SegmentStarted(2, 1, 1.0))
    actions = state.take_actions()
    assert not any(isinstance(a, TransmitEntry) for a in actions)
    assert any(isinstance(a, CloseSegment) for a in actions)
    assert state.pending_writes == 0
