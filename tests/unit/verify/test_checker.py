"""The failover checker on hand-written histories: a clean one passes; each anomaly is found
and names the operations that show it; malformed lines are refused with their line number."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from core.errors import ConfigError
from verify.checker import KINDS, check
from verify.history import Op, encode_op, read_history
from verify.liveness import summarise

pytestmark = pytest.mark.unit

REGIONS = ("us-east", "us-west", "eu-west")


class History:
    """Builds a history line by line, with a clock that moves 0.1 s per operation."""

    def __init__(self) -> None:
        self.lines: list[dict[str, Any]] = []

    def add(self, **op: Any) -> None:
        self.lines.append({"time": round(0.1 * len(self.lines), 1), **op})

    def send(
        self, value: int, dlsn: str | None, outcome: str = "ok", idempotent: bool = False
    ) -> None:
        self.add(process="w0", type="invoke", f="send", stream="s", value=value,
                 idempotent=idempotent)  # fmt: skip
        done: dict[str, Any] = {"process": "w0", "type": outcome, "f": "send", "stream": "s"}
        self.add(**done, value=value, **({"dlsn": dlsn} if dlsn else {}))

    def poll(self, process: str, records: list[tuple[str, int]]) -> None:
        self.add(process=process, type="ok", f="poll", stream="s", region="eu-west",
                 records=[list(r) for r in records])  # fmt: skip

    def finals(self, records: list[tuple[str, int]], **per_region: list[tuple[str, int]]) -> None:
        for region in REGIONS:
            chosen = per_region.get(region.replace("-", "_"), records)
            self.add(process=f"final-{region}", type="ok", f="final", stream="s", region=region,
                     records=[list(r) for r in chosen])  # fmt: skip

    def ops(self) -> list[Op]:
        return read_history(encode_op(line) for line in self.lines)


def clean() -> History:
    h = History()
    for i in range(3):
        h.send(i, f"1.{i}.0")
    h.poll("r0", [("1.0.0", 0), ("1.1.0", 1)])
    h.add(process="nemesis", type="info", f="fault", fault="kill-write-proxy", value="kill wp")
    h.send(3, "2.0.0")
    h.poll("r0", [("1.2.0", 2), ("2.0.0", 3)])
    h.add(process="auditor", type="ok", f="audit", stream="s", segment=1, value=True)
    h.finals([("1.0.0", 0), ("1.1.0", 1), ("1.2.0", 2), ("2.0.0", 3)])
    return h


def kinds(h: History) -> dict[str, int]:
    return {kind: n for kind, n in check(h.ops()).counts().items() if n}


def test_a_clean_history_passes_with_every_count_zero_and_its_liveness() -> None:
    report = check(clean().ops())
    assert report.valid and report.anomalies == []
    assert report.counts() == dict.fromkeys(KINDS, 0)
    assert report.operations["send ok"] == 4 and report.operations["final ok"] == 3
    [window] = report.unavailability_s["kill-write-proxy"]
    assert window == pytest.approx(0.2)  # the fault, then the send's invoke and ack
    assert summarise(report.unavailability_s["kill-write-proxy"]) == (window, window, 0)


def test_an_acknowledged_send_missing_in_one_region_is_lost_there() -> None:
    h = History()
    h.send(0, "1.0.0")
    h.send(1, "1.1.0")
    h.finals([("1.0.0", 0), ("1.1.0", 1)], us_west=[("1.0.0", 0)])
    report = check(h.ops())
    lost = [a for a in report.anomalies if a.kind == "lost"]
    assert len(lost) == 1 and "value 1" in lost[0].detail and "us-west" in lost[0].detail
    assert [op.f for op in lost[0].ops] == ["send", "final"]
    assert lost[0].ops[1].region == "us-west"
    assert kinds(h) == {"lost": 1, "region-divergence": 1}
    assert not report.valid


def test_an_ack_past_its_segments_end_is_a_fenced_owners_ack() -> None:
    h = History()
    h.send(0, "1.0.0")
    h.send(1, "1.1.0")  # a zombie owner acknowledged this in the segment the new owner sealed
    h.send(2, "2.0.0")
    h.finals([("1.0.0", 0), ("2.0.0", 2)])
    report = check(h.ops())
    assert kinds(h) == {"fenced-ack": 1}
    [anomaly] = report.anomalies
    assert "value 1 acknowledged at 1.1.0, past where its segment was sealed" in anomaly.detail


def test_a_range_a_final_read_found_lost_is_lost_even_with_no_acknowledgement_in_it() -> None:
    h = clean()
    h.add(process="final-us-west", type="ok", f="final", stream="s", region="us-west",
          records=[list(r) for r in (("1.0.0", 0), ("1.1.0", 1), ("1.2.0", 2), ("2.0.0", 3))],
          lost=[["1.3.0", "1.4.0"]])  # fmt: skip
    report = check(h.ops())
    assert kinds(h) == {"lost": 1}
    [anomaly] = report.anomalies
    assert anomaly.ops == (h.ops()[-1],)
    assert "us-west: records 1.3.0 to 1.4.0 could be served by no bookie" in anomaly.detail


def test_an_ack_in_a_range_found_lost_is_lost_not_fenced() -> None:
    h = History()
    h.send(0, "1.0.0")
    h.send(1, "1.1.0")  # the end of its segment, which no bookie could serve any more
    h.send(2, "2.0.0")
    for region in REGIONS:
        h.add(process=f"final-{region}", type="ok", f="final", stream="s", region=region,
              records=[["1.0.0", 0], ["2.0.0", 2]], lost=[["1.1.0", "1.1.0"]])  # fmt: skip
    report = check(h.ops())
    assert kinds(h) == {"lost": 1}, "one anomaly per lost ack, the range named in it"
    assert (
        "value 1 acknowledged, in records 1.1.0 to 1.1.0 found lost" in report.anomalies[0].detail
    )


def test_a_value_at_two_positions_is_a_duplicate_counted_by_how_it_was_sent() -> None:
    for idempotent, kind in ((True, "duplicate-idempotent"), (False, "duplicate-plain")):
        h = History()
        h.send(0, "1.0.0", idempotent=idempotent)
        h.finals([("1.0.0", 0), ("1.1.0", 0)])
        report = check(h.ops())
        assert kinds(h) == {kind: 1}, kind
        assert report.valid is (kind == "duplicate-plain")
        assert "value 0 at 1.0.0, 1.1.0" in report.anomalies[0].detail


def test_one_dlsn_with_two_values_is_an_inconsistent_offset() -> None:
    h = History()
    h.send(0, "1.0.0")
    h.poll("r0", [("1.0.0", 7)])
    h.finals([("1.0.0", 0)])
    report = check(h.ops())
    assert kinds(h)["inconsistent-offset"] == 1
    anomaly = next(a for a in report.anomalies if a.kind == "inconsistent-offset")
    assert "1.0.0 holds values [0, 7]" in anomaly.detail
    assert {op.f for op in anomaly.ops} == {"send", "poll"}


def test_a_value_read_after_its_send_failed_is_an_aborted_read() -> None:
    h = History()
    h.send(0, None, outcome="fail")
    h.finals([("1.0.0", 0)])
    assert kinds(h) == {"aborted-read": 1}
    h = History()
    h.send(0, None, outcome="info")  # may have happened: reading it is fine
    h.finals([("1.0.0", 0)])
    assert kinds(h) == {}


def test_an_answer_outside_the_documented_table_is_reported() -> None:
    h = clean()
    h.add(process="w0", type="invoke", f="send", stream="s", value=9)
    h.add(process="w0", type="info", f="send", stream="s", value=9, code="outcome_unknown",
          cause="owner_fenced")  # fmt: skip
    h.add(process="w1", type="invoke", f="send", stream="s", value=10)
    h.add(process="w1", type="fail", f="send", stream="s", value=10, code="proxy_unreachable")
    assert kinds(h) == {}, "documented codes and the client's own are fine"
    h.add(process="w0", type="invoke", f="send", stream="s", value=11)
    h.add(process="w0", type="fail", f="send", stream="s", value=11, code="ledger_recovery_failed")
    h.add(process="r0", type="fail", f="poll", stream="s", region="eu-west", code="bookie_timeout")
    report = check(h.ops())
    assert report.counts()["undocumented-answer"] == 2 and not report.valid
    assert "answered 'ledger_recovery_failed'" in report.anomalies[0].describe()


def test_polls_going_back_or_passing_over_records_are_reported() -> None:
    h = History()
    for i in range(4):
        h.send(i, f"1.{i}.0")
    h.poll("r0", [("1.0.0", 0), ("1.1.0", 1)])
    h.poll("r0", [("1.0.0", 0)])  # back
    h.poll("r1", [("1.0.0", 0), ("1.3.0", 3)])  # past 1.1.0 and 1.2.0
    h.finals([(f"1.{i}.0", i) for i in range(4)])
    report = check(h.ops())
    assert kinds(h) == {"nonmonotonic-poll": 1, "poll-skip": 1}
    skip = next(a for a in report.anomalies if a.kind == "poll-skip")
    assert "r1 went from 1.0.0 to 1.3.0, past 2 record(s) from 1.1.0" in skip.detail


def test_regions_that_disagree_and_a_failed_audit_are_reported() -> None:
    h = History()
    h.finals([("1.0.0", 0), ("1.1.0", 1)], eu_west=[("1.0.0", 0), ("1.1.0", 2)])
    h.add(process="auditor", type="ok", f="audit", stream="s", segment=4, value=False,
          detail="entry 0..9 in 1 region")  # fmt: skip
    report = check(h.ops())
    assert kinds(h) == {"region-divergence": 1, "durability": 1, "inconsistent-offset": 1}
    divergence = next(a for a in report.anomalies if a.kind == "region-divergence")
    assert "record 1 (1.1.0=2 vs 1.1.0=1)" in divergence.detail
    assert "eu-west: 2 records; us-east, us-west: 2 records" in divergence.detail
    durability = next(a for a in report.anomalies if a.kind == "durability")
    assert durability.detail == "segment 4: entry 0..9 in 1 region"


def test_a_fault_with_no_acknowledged_send_after_it_never_ended() -> None:
    h = History()
    h.send(0, "1.0.0")
    h.add(process="nemesis", type="info", f="fault", fault="region-down", value="us-west")
    h.send(1, None, outcome="info")
    report = check(h.ops())
    assert report.unavailability_s == {"region-down": [None]}
    assert summarise(report.unavailability_s["region-down"]) == (None, None, 1)


def test_a_window_is_the_longest_silence_of_a_stream_while_the_fault_lasts() -> None:
    h = History()
    h.send(0, "1.0.0")
    h.add(process="nemesis", type="info", f="fault", fault="isolate-region", value="isolate w")
    at = h.lines[-1]["time"]
    h.send(1, "1.1.0")  # in flight when the fault began: acknowledged at once
    h.send(2, None, outcome="info")
    h.send(3, None, outcome="info")
    h.add(process="nemesis", type="info", f="heal", fault="isolate-region", value="isolate w")
    h.send(4, None, outcome="info")
    h.send(5, "2.0.0")  # the stream writes again only after the heal
    quiet_from = at + 0.2  # send 1's acknowledgement
    [window] = check(h.ops()).unavailability_s["isolate-region"]
    assert window == pytest.approx(h.lines[-1]["time"] - quiet_from)


def test_a_fault_lasts_until_its_worst_hit_stream_is_acknowledged_again() -> None:
    h = History()
    h.send(0, "1.0.0")
    h.add(process="nemesis", type="info", f="fault", fault="kill-write-proxy", value="kill wp")
    at = h.lines[-1]["time"]
    # stream "t" (owned elsewhere) goes on at once; stream "s" waits for its new owner
    h.add(process="w1", type="invoke", f="send", stream="t", value=100)
    h.add(process="w1", type="ok", f="send", stream="t", value=100, dlsn="1.0.0")
    h.send(1, None, outcome="info")
    h.send(2, "2.0.0")
    windows = check(h.ops()).unavailability_s["kill-write-proxy"]
    assert windows == [pytest.approx(h.lines[-1]["time"] - at)]
    assert windows[0] > 0.2 + 1e-9  # more than the unaffected stream's wait


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("{not json", "history line 1: not JSON"),
        ("[1, 2]", "history line 1: expected an object"),
        ('{"time": 1, "process": "w", "type": "done", "f": "send"}', "type 'done'"),
        ('{"time": "x", "process": "w", "type": "ok", "f": "send"}', "time 'x'"),
        ('{"time": 1, "process": "w", "type": "ok", "f": "send", "dlsn": "1.x"}', "dlsn"),
        ('{"time": 1, "process": "w", "type": "ok", "f": "poll", "records": [[1, 2]]}', "record"),
        ('{"time": 1, "process": "w", "type": "ok", "f": "final", "lost": [["2.0.0"]]}', "lost"),
        (
            '{"time": 1, "process": "w", "type": "ok", "f": "final", "lost": [["2.0.0", "1.0.0"]]}',
            "lost range",
        ),
    ],
)
def test_malformed_history_lines_are_refused_with_their_line(line: str, expected: str) -> None:
    with pytest.raises(ConfigError, match="history line 1") as refused:
        read_history([line])
    assert expected in str(refused.value)


def test_failover_check_reports_and_exits_by_validity(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from cli.main import main

    good, bad = tmp_path / "good.jsonl", tmp_path / "bad.jsonl"
    good.write_text("\n".join(encode_op(line) for line in clean().lines) + "\n")
    broken = clean()
    broken.send(9, "2.1.0")  # acknowledged, in no final read
    bad.write_text("\n".join(encode_op(line) for line in broken.lines) + "\n")
    assert main(["failover", "check", str(good)]) == 0
    text = capsys.readouterr().out
    assert "lost                        0" in text and "valid: no guarantee broken" in text
    assert "kill-write-proxy         1 fault(s): median 0.20 s" in text
    assert main(["failover", "check", str(bad), "--json"]) == 4
    body = json.loads(capsys.readouterr().out)
    assert body["valid"] is False and body["anomalies"]["lost"] == 1
    assert main(["failover", "check", str(tmp_path / "missing.jsonl")]) == 1
    assert "cannot be read" in capsys.readouterr().err


def test_copies_missing_after_rebuilding_settled_are_under_replicated() -> None:
    h = History()
    h.finals([("1.0.0", 0)])
    h.add(process="auditor", type="ok", f="replicas", value=0, detail="nothing short")
    assert "under-replicated" not in kinds(h)
    h.add(process="auditor", type="ok", f="replicas", value=2,
          detail="ledger 3: 127.0.0.1:3181 at position 0 (entries 0..9): entry 9: missing")  # fmt: skip
    report = check(h.ops())
    assert kinds(h)["under-replicated"] == 1
    anomaly = next(a for a in report.anomalies if a.kind == "under-replicated")
    assert anomaly.detail.startswith("2 gaps: ledger 3: 127.0.0.1:3181")
    assert not report.valid
