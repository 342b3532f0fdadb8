"""Runs golden-script commands against LogWriterState and renders its actions.

Machine:  new-writer [transmit=size|periodic|immediate] [buffer=N] [interval=S] [sla=S]
                     [roll-bytes=N] [roll-s=S] [max-txid=N] [pending-max=N] [now=S]
Inputs:   write payload=TEXT [txid=N] [now-ms=N], batch n=N [size=N] [now-ms=N], flush,
          close, eos [now-ms=N], session [now-ms=N], state
Events:   acked t=N entry=E, failed t=N kind=K reason=TEXT, writer-failed kind=K reason=TEXT,
          segment-started seq=N first-seq=N now=S, tick now=S
A refused input renders as `error <code>: <message>` and must change nothing.
"""

from __future__ import annotations

from core.errors import GlobelogError
from core.records import Record
from core.streams import StreamSettings, TransmitPolicy
from tests.scenario.ledger.script import Args
from writer.events import (
    CloseSegment,
    CompleteWrites,
    EntryAcked,
    EntryFailed,
    FailureKind,
    FailWrites,
    RollSegment,
    SegmentStarted,
    SegmentSummary,
    Ticked,
    TransmitEntry,
    WriterFailed,
)
from writer.state import LogWriterState, SegmentStart

NOW_MS = 1_000_000  # the wall clock writes assign txids from, unless now-ms= says otherwise


def _summary(summary: SegmentSummary) -> str:
    last = "-" if summary.last_dlsn is None else str(summary.last_dlsn)
    eos = " end-of-stream" if summary.end_of_stream else ""
    return (
        f"segment={summary.sequence} last-txid={summary.last_txid} last-dlsn={last} "
        f"records={summary.record_count}{eos}"
    )


def render(action: object) -> str:
    match action:
        case TransmitEntry():
            records = ",".join(
                f"{r.txid}{'/control' if r.is_control else ''}"
                f"{'/eos' if r.is_end_of_stream else ''}:{r.payload.decode(errors='replace')}"
                for r in action.records
            )
            return f"transmit t={action.transmit_id} first-position={action.first_position} [{records}]"
        case CompleteWrites():
            done = " ".join(
                f"w{w}={written.dlsn}/txid={written.txid}/seq={written.seq}"
                for w, written in action.results
            )
            return f"complete {done}"
        case FailWrites():
            ids = ",".join(map(str, action.write_ids))
            return f"fail-writes w={ids} {action.kind.value}: {action.reason}"
        case RollSegment():
            return f"roll {_summary(action.summary)}"
        case CloseSegment():
            return f"close-segment {_summary(action.summary)}"
    raise AssertionError(f"unknown action {action!r}")


class Runner:
    def __init__(self) -> None:
        self.state: LogWriterState | None = None

    def run(self, command: str) -> list[str]:
        args = Args(command)
        lines = self._dispatch(args)
        args.finish()
        assert self.state is not None, "a script starts with new-writer"
        return lines + [render(a) for a in self.state.take_actions()]

    def _dispatch(self, args: Args) -> list[str]:
        if args.name == "new-writer":
            settings = StreamSettings(
                transmit=TransmitPolicy(args.text("transmit", "size")),
                buffer_bytes=args.integer("buffer", 100),
                flush_interval_s=args.number("interval", 0.002),
                flush_sla_s=args.number("sla", 0.05),
                segment_roll_bytes=args.integer("roll-bytes", 1_000_000),
                segment_roll_s=args.number("roll-s", 3600),
                pending_writes_max=args.integer("pending-max", 1000),
            )
            start = SegmentStart(1, 0, args.integer("max-txid", -1))
            self.state = LogWriterState("s", settings, start, args.number("now", 0.0))
            return []
        state = self.state
        assert state is not None, "a script starts with new-writer"
        try:
            return self._input(args, state)
        except GlobelogError as err:
            return [f"error {err.code}: {err}"]

    def _input(self, args: Args, state: LogWriterState) -> list[str]:
        timed = ("write", "batch", "eos", "session")
        now_ms = args.integer("now-ms", NOW_MS) if args.name in timed else 0
        match args.name:
            case "write":
                txid = args.integer("txid") if args.has("txid") else None
                record = Record(args.text("payload").encode(), txid)
                return [f"write w{state.write(record, now_ms)}"]
            case "batch":
                size = args.integer("size", 10)
                records = [b"b" * size for _ in range(args.integer("n"))]
                state.check_batch(records)
                first = state.write_batch(records, now_ms)
                return [f"batch w{first}..w{first + len(records) - 1}"]
            case "flush":
                state.flush()
            case "close":
                state.close()
            case "session":
                return [f"session w{state.mark_session(now_ms)}"]
            case "eos":
                return [f"end-of-stream w{state.mark_end_of_stream(now_ms)}"]
            case "state":
                wakeup = state.next_wakeup_s()
                return [
                    f"phase={state.phase.value} pending={state.pending_writes} room={state.room} "
                    f"last-txid={state.last_txid} wakeup={'-' if wakeup is None else round(wakeup, 6)}"
                ]
            case "acked":
                state.handle(EntryAcked(args.integer("t"), args.integer("entry")))
            case "failed":
                kind = FailureKind(args.text("kind"))
                state.handle(EntryFailed(args.integer("t"), kind, args.text("reason")))
            case "writer-failed":
                kind = FailureKind(args.text("kind"))
                state.handle(WriterFailed(kind, args.text("reason")))
            case "segment-started":
                event = SegmentStarted(
                    args.integer("seq"), args.integer("first-seq"), args.number("now")
                )
                state.handle(event)
            case "tick":
                state.handle(Ticked(args.number("now")))
            case _:
                raise AssertionError(f"unknown command {args.name!r}")
        return []
