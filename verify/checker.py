"""The failover checker: the invariants of docs/design.md §5 over a recorded history (history.py).

Every anomaly names the operations that show it. Kinds (each count, 0 included, is a result):
    lost                 an acknowledged send absent from some region's final read, or a
                         range of records a final read found no bookie could serve
    fenced-ack           an acknowledged send absent from the final reads at a position its
                         segment no longer reaches: an owner acknowledged after it was fenced,
                         or acknowledged an entry too few bookies held for recovery to find
    duplicate-idempotent a value read at two positions, sent with a producer id
    duplicate-plain      the same for a plain send (a retried send may land twice: reported,
                         but it breaks no guarantee of plain writes)
    inconsistent-offset  one DLSN holding two values (reads and acknowledgements)
    aborted-read         a value read whose send failed definitively (`fail`: the answer
                         said not written, docs/http-api.md) in a poll or a final read
    nonmonotonic-poll    a reader's polls going back in a stream
    poll-skip            a reader passing over a record the final reads hold
    region-divergence    two regions' final reads of a stream that differ
    durability           a segment whose ensemble audit failed
    under-replicated     a settled fragment whose bookie lacks (or cannot serve) the first or
                         last entry it should hold, after the rebuilders settled
    read-unavailable     a region whose read proxy did not reach a stream's acknowledged end
                         within the run's bound (its final read through the proxy stopped short),
                         or whose final read through the library did not end
    undocumented-answer  an error whose code is neither in docs/http-api.md's table nor one
                         the client raises itself (core/answers.py)
Liveness (verify/liveness.py): for each fault, the longest time a stream went without an
acknowledged send while it lasted (its unavailability window).
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from dataclasses import dataclass, field

from core.answers import ANSWERS, CLIENT_CODES
from core.dlsn import DLSN
from verify.history import Op
from verify.liveness import unavailability

KINDS = (
    "lost",
    "fenced-ack",
    "duplicate-idempotent",
    "duplicate-plain",
    "inconsistent-offset",
    "aborted-read",
    "nonmonotonic-poll",
    "poll-skip",
    "region-divergence",
    "durability",
    "under-replicated",
    "read-unavailable",
    "undocumented-answer",
)
# Guarantees broken by an anomaly of each kind; duplicate-plain breaks none.
VIOLATIONS = frozenset(KINDS) - {"duplicate-plain"}


@dataclass(frozen=True, slots=True)
class Anomaly:
    kind: str
    stream: str | None
    ops: tuple[Op, ...]
    detail: str

    def describe(self) -> str:
        shown = "; ".join(op.describe() for op in self.ops[:4])
        more = f" (+{len(self.ops) - 4} more)" if len(self.ops) > 4 else ""
        return f"{self.kind}: {self.detail} [{shown}{more}]"


@dataclass(slots=True)
class CheckReport:
    anomalies: list[Anomaly] = field(default_factory=list)
    operations: dict[str, int] = field(default_factory=dict)
    unavailability_s: dict[str, list[float | None]] = field(default_factory=dict)

    def counts(self) -> dict[str, int]:
        found = {kind: 0 for kind in KINDS}
        for anomaly in self.anomalies:
            found[anomaly.kind] += 1
        return found

    @property
    def valid(self) -> bool:
        return not any(a.kind in VIOLATIONS for a in self.anomalies)


@dataclass(slots=True)
class _Send:
    invoke: Op | None = None
    done: Op | None = None


def check(history: list[Op]) -> CheckReport:
    report = CheckReport()
    sends: dict[tuple[str, int], _Send] = defaultdict(_Send)
    finals: dict[tuple[str, str], Op] = {}  # (stream, region) -> the last library final read
    proxy_finals: dict[tuple[str, str], Op] = {}  # the same through the region's read proxy
    reads: list[Op] = []  # ok polls and finals of both kinds, and the finals that did not end
    unended: list[Op] = []  # library final reads that did not end (`info`)
    for op in history:
        if op.f == "send" and op.stream is not None and type(op.value) is int:
            entry = sends[(op.stream, op.value)]
            if op.type == "invoke":
                entry.invoke = op
            else:
                entry.done = op
        elif op.f in ("poll", "final", "proxy-final") and op.type == "ok" and op.stream:
            reads.append(op)
            if op.f == "final" and op.region is not None:
                finals[(op.stream, op.region)] = op
            elif op.f == "proxy-final" and op.region is not None:
                proxy_finals[(op.stream, op.region)] = op
        elif op.f == "final" and op.type == "info" and op.stream:
            reads.append(op)
            unended.append(op)
        if op.type in ("fail", "info") and "code" in op.extra:
            code = op.extra["code"]
            if code not in ANSWERS and code not in CLIENT_CODES:
                report.anomalies.append(
                    Anomaly("undocumented-answer", op.stream, (op,), f"answered {code!r}")
                )
        if op.f == "audit" and op.type == "ok" and op.value is False:
            report.anomalies.append(
                Anomaly("durability", op.stream, (op,), f"segment {op.segment}: {op.detail}")
            )
        if op.f == "replicas" and op.type == "ok" and op.value:
            report.anomalies.append(
                Anomaly("under-replicated", op.stream, (op,), f"{op.value} gaps: {op.detail}")
            )
    report.operations = _operation_counts(history)
    _check_positions(report, sends, reads)
    _check_finals(report, sends, finals)
    _check_lost_ranges(report, sends, finals, unended)
    _check_finals_ended(report, finals, unended)
    _check_polls(report, reads, finals)
    _check_read_availability(report, sends, finals, proxy_finals)
    report.unavailability_s = unavailability(history)
    return report


def _operation_counts(history: list[Op]) -> dict[str, int]:
    counts: dict[str, int] = defaultdict(int)
    for op in history:
        if op.type != "invoke":
            counts[f"{op.f} {op.type}"] += 1
    return dict(sorted(counts.items()))


def _check_positions(
    report: CheckReport, sends: dict[tuple[str, int], _Send], reads: list[Op]
) -> None:
    """One value per DLSN, one DLSN per value, no value of a failed send."""
    at: dict[tuple[str, DLSN], dict[int, list[Op]]] = defaultdict(lambda: defaultdict(list))
    where: dict[tuple[str, int], dict[DLSN, list[Op]]] = defaultdict(lambda: defaultdict(list))
    for (stream, value), send in sends.items():
        done = send.done
        if done is not None and done.type == "ok" and done.dlsn is not None:
            at[(stream, done.dlsn)][value].append(done)
            where[(stream, value)][done.dlsn].append(done)
    for op in reads:
        assert op.stream is not None
        for dlsn, value in op.records:
            at[(op.stream, dlsn)][value].append(op)
            where[(op.stream, value)][dlsn].append(op)
    for (stream, dlsn), values in sorted(at.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        if len(values) > 1:
            ops = tuple(ops[0] for ops in values.values())
            report.anomalies.append(
                Anomaly(
                    "inconsistent-offset",
                    stream,
                    ops,
                    f"{dlsn} holds values {sorted(values)}",
                )
            )
    for (stream, value), positions in sorted(where.items()):
        known = sends.get((stream, value))
        if len(positions) > 1:
            idempotent = known is not None and known.invoke is not None and known.invoke.idempotent
            kind = "duplicate-idempotent" if idempotent else "duplicate-plain"
            ops = tuple(ops[0] for ops in positions.values())
            report.anomalies.append(
                Anomaly(
                    kind,
                    stream,
                    ops,
                    f"value {value} at {', '.join(str(d) for d in sorted(positions))}",
                )
            )
        if known is not None and known.done is not None and known.done.type == "fail":
            first_read = next(op for ops in positions.values() for op in ops if op.f != "send")
            report.anomalies.append(
                Anomaly(
                    "aborted-read",
                    stream,
                    (known.done, first_read),
                    f"value {value} was read though its send failed",
                )
            )


def _check_finals(
    report: CheckReport, sends: dict[tuple[str, int], _Send], finals: dict[tuple[str, str], Op]
) -> None:
    """Every acknowledged value in every region's final read; the regions agree."""
    by_stream: dict[str, list[Op]] = defaultdict(list)
    for (stream, _), op in sorted(finals.items()):
        by_stream[stream].append(op)
    for stream, ops in by_stream.items():
        groups: dict[tuple[tuple[DLSN, int], ...], list[Op]] = defaultdict(list)
        for op in ops:
            groups[op.records].append(op)
        if len(groups) > 1:
            heads = [members[0] for members in groups.values()]
            sizes = "; ".join(
                f"{', '.join(str(op.region) for op in members)}: {len(records)} records"
                for records, members in groups.items()
            )
            report.anomalies.append(
                Anomaly(
                    "region-divergence",
                    stream,
                    tuple(heads),
                    f"{len(groups)} different final reads ({sizes}); first difference at "
                    f"{_first_difference(heads[0].records, heads[1].records)}",
                )
            )
    values_of = {op.index: {value for _, value in op.records} for op in finals.values()}
    for (stream, value), send in sorted(sends.items()):
        done = send.done
        if done is None or done.type != "ok":
            continue
        missing = [op for op in by_stream.get(stream, []) if value not in values_of[op.index]]
        if not missing:
            continue
        found_lost = _lost_range_of(done.dlsn, missing)
        if found_lost is not None:
            kind = "lost"
            why = f"acknowledged, in records {found_lost[0]} to {found_lost[1]} found lost"
        elif done.dlsn is not None and _segment_ended_before(done.dlsn, missing[0]):
            kind = "fenced-ack"
            why = (
                f"acknowledged at {done.dlsn}, past where its segment was sealed (acknowledged "
                "after a new owner fenced it, or held by too few bookies for recovery to find)"
            )
        else:
            kind, why = "lost", "acknowledged"
        regions = ", ".join(str(op.region) for op in missing)
        report.anomalies.append(
            Anomaly(kind, stream, (done, *missing), f"value {value} {why}; missing in {regions}")
        )


def _in_range(dlsn: DLSN, lost: tuple[DLSN, DLSN]) -> bool:
    """True when `dlsn` is a record of the lost range: the reader names a range by its first
    and last entry (slot 0), so every slot of the last entry is in it."""
    first, last = lost
    return first <= dlsn and (dlsn.segment, dlsn.entry) <= (last.segment, last.entry)


def _lost_range_of(dlsn: DLSN | None, reads: list[Op]) -> tuple[DLSN, DLSN] | None:
    """The range one of `reads` found lost that holds `dlsn`, if any."""
    if dlsn is None:
        return None
    return next((r for op in reads for r in op.lost if _in_range(dlsn, r)), None)


def _check_lost_ranges(
    report: CheckReport,
    sends: dict[tuple[str, int], _Send],
    finals: dict[tuple[str, str], Op],
    unended: list[Op],
) -> None:
    """A range of records a final read found no bookie could serve is data lost, whether or
    not an acknowledged send is known to lie in it; a range that holds an acknowledgement
    missing from that read is already reported with the send (_check_finals)."""
    for op in sorted((*finals.values(), *unended), key=lambda op: op.index):
        values = {value for _, value in op.records}
        for lost in op.lost:
            acked_in = any(
                stream == op.stream
                and send.done is not None
                and send.done.type == "ok"
                and send.done.dlsn is not None
                and value not in values
                and _in_range(send.done.dlsn, lost)
                for (stream, value), send in sends.items()
            )
            if acked_in and op.type == "ok":
                continue
            report.anomalies.append(
                Anomaly(
                    "lost",
                    op.stream,
                    (op,),
                    f"{op.region}: records {lost[0]} to {lost[1]} could be served by no bookie",
                )
            )


def _check_finals_ended(
    report: CheckReport, finals: dict[tuple[str, str], Op], unended: list[Op]
) -> None:
    """Every library final read ended: one whose bound ran out, or that an error answered
    stopped, leaves its region's stream unjudged (unless another read of it ended)."""
    for op in unended:
        assert op.stream is not None
        if op.region is not None and (op.stream, op.region) in finals:
            continue
        why = f": {op.detail}" if op.detail else ""
        report.anomalies.append(
            Anomaly(
                "read-unavailable",
                op.stream,
                (op,),
                f"{op.region}: the library's final read of {op.stream} did not end{why}",
            )
        )


def _segment_ended_before(dlsn: DLSN, final: Op) -> bool:
    """True when the final read has records after `dlsn`'s segment and that segment's last
    record it holds (if any) is before `dlsn`: the segment was sealed short of it."""
    later = any(d.segment > dlsn.segment for d, _ in final.records)
    same = [d for d, _ in final.records if d.segment == dlsn.segment]
    return later and (not same or max(same) < dlsn)


def _first_difference(a: tuple[tuple[DLSN, int], ...], b: tuple[tuple[DLSN, int], ...]) -> str:
    for index, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return f"record {index} ({x[0]}={x[1]} vs {y[0]}={y[1]})"
    return f"record {min(len(a), len(b))} (one read ends there)"


def _check_polls(report: CheckReport, reads: list[Op], finals: dict[tuple[str, str], Op]) -> None:
    """A reader's polls move forward and pass over nothing the final reads hold; a read
    through a read proxy from the start of the stream (`proxy-final`) also begins at the
    stream's first record."""
    reference: dict[str, list[DLSN]] = {}  # sorted, for bisecting
    for (stream, _), op in sorted(finals.items()):
        reference.setdefault(stream, sorted(d for d, _ in op.records))
    last: dict[tuple[str, str], tuple[DLSN, Op]] = {}
    for op in reads:
        if op.f == "final":
            continue
        assert op.stream is not None
        key = (op.process, op.stream)
        order = reference.get(op.stream, [])
        for dlsn, _ in op.records:
            previous = last.get(key)
            if previous is None and op.f == "proxy-final":
                _check_skip(report, op, order, None, (op,), dlsn)
            elif previous is not None:
                before, seen_in = previous
                if dlsn <= before:
                    report.anomalies.append(
                        Anomaly(
                            "nonmonotonic-poll",
                            op.stream,
                            (seen_in, op),
                            f"{op.process} read {dlsn} after {before}",
                        )
                    )
                else:
                    _check_skip(report, op, order, before, (seen_in, op), dlsn)
            last[key] = (dlsn, op)


def _check_skip(
    report: CheckReport,
    op: Op,
    order: list[DLSN],
    before: DLSN | None,
    ops: tuple[Op, ...],
    dlsn: DLSN,
) -> None:
    """A poll-skip when `order` (the final read) holds records between `before` (None: the
    start of the stream) and `dlsn`."""
    low = 0 if before is None else bisect.bisect_right(order, before)
    skipped = order[low : bisect.bisect_left(order, dlsn)]
    if skipped:
        report.anomalies.append(
            Anomaly(
                "poll-skip",
                op.stream,
                ops,
                f"{op.process} went from {before or 'the start'} to {dlsn}, past "
                f"{len(skipped)} record(s) from {skipped[0]}",
            )
        )


def _check_read_availability(
    report: CheckReport,
    sends: dict[tuple[str, int], _Send],
    finals: dict[tuple[str, str], Op],
    proxy_finals: dict[tuple[str, str], Op],
) -> None:
    """Every region's read proxy reached every stream's acknowledged end (its highest
    acknowledged DLSN, or the end its library final read found when a fenced acknowledgement
    lies past that) within the run's bound. Histories without reads through the proxies
    (recorded before they were made) are not judged."""
    if not proxy_finals:
        return
    ends: dict[str, Op] = {}  # stream -> its acknowledgement at the highest DLSN
    for (stream, _), send in sends.items():
        done = send.done
        if done is None or done.type != "ok" or done.dlsn is None:
            continue
        highest = ends.get(stream)
        if highest is None or (highest.dlsn is not None and done.dlsn > highest.dlsn):
            ends[stream] = done
    regions = sorted({region for _, region in (*finals, *proxy_finals)})
    for stream, last_ack in sorted(ends.items()):
        assert last_ack.dlsn is not None
        for region in regions:
            library = finals.get((stream, region))
            through = proxy_finals.get((stream, region))
            if through is None:
                report.anomalies.append(
                    Anomaly(
                        "read-unavailable",
                        stream,
                        (last_ack,) if library is None else (last_ack, library),
                        f"{region}: no read of {stream} through its read proxy in the history",
                    )
                )
                continue
            reached = max((d for d, _ in through.records), default=None)
            held = max((d for d, _ in library.records), default=None) if library else None
            if reached is not None and (
                reached >= last_ack.dlsn or (held is not None and reached >= held)
            ):
                continue
            report.anomalies.append(_unavailable(stream, region, through, last_ack, reached))


def _unavailable(
    stream: str, region: str, through: Op, last_ack: Op, reached: DLSN | None
) -> Anomaly:
    bound = through.extra.get("bound_s")
    within = f" within {bound:g} s" if isinstance(bound, int | float) else ""
    why = f"; {through.detail}" if through.detail else ""
    return Anomaly(
        "read-unavailable",
        stream,
        (through, last_ack),
        f"{region}'s read proxy stopped at {reached or 'the start'} ({len(through.records)} "
        f"records){within}, short of the acknowledged end {last_ack.dlsn}{why}",
    )
