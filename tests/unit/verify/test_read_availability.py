"""The checker's read-availability rule on hand-written histories: a region whose read proxy
stops short of a stream's acknowledged end is `read-unavailable` and fails the run; one that
reaches it passes; a saved history shows it to `globelog failover check` too."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.unit.verify.test_checker import REGIONS, History, clean
from verify.checker import check
from verify.history import encode_op

pytestmark = pytest.mark.unit

ALL = [("1.0.0", 0), ("1.1.0", 1), ("1.2.0", 2), ("2.0.0", 3)]  # clean()'s final read


def through_proxies(h: History, records: list[tuple[str, int]], **per_region: Any) -> History:
    """A read of stream s through every region's read proxy; `eu_west=(records, detail)`
    gives one region its own."""
    for region in REGIONS:
        chosen, detail = per_region.get(region.replace("-", "_"), (records, "reached the end"))
        h.add(process=f"proxy-final-{region}", type="ok", f="proxy-final", stream="s",
              region=region, records=[list(r) for r in chosen], bound_s=15.0,
              detail=detail)  # fmt: skip
    return h


def unavailable(h: History) -> list[str]:
    return [a.detail for a in check(h.ops()).anomalies if a.kind == "read-unavailable"]


def test_every_region_proxy_reaching_the_acknowledged_end_passes() -> None:
    report = check(through_proxies(clean(), ALL).ops())
    assert report.valid and report.anomalies == []
    assert report.counts()["read-unavailable"] == 0
    assert report.operations["proxy-final ok"] == 3


def test_a_region_proxy_stopping_short_is_read_unavailable_and_fails_the_run() -> None:
    # eu-west's proxy stopped following after an isolation: the library read everything
    stuck = (ALL[:2], "bound ran out; last answer metadata_unavailable: no ZooKeeper session")
    h = through_proxies(clean(), ALL, eu_west=stuck)
    report = check(h.ops())
    [anomaly] = [a for a in report.anomalies if a.kind == "read-unavailable"]
    assert anomaly.detail == (
        "eu-west's read proxy stopped at 1.1.0 (2 records) within 15 s, short of the "
        "acknowledged end 2.0.0; bound ran out; last answer metadata_unavailable: no ZooKeeper "
        "session"
    )
    assert [(op.f, op.region) for op in anomaly.ops] == [("proxy-final", "eu-west"), ("send", None)]
    assert report.counts()["read-unavailable"] == 1 and not report.valid
    assert [a.kind for a in report.anomalies] == ["read-unavailable"]  # nothing else broken


def test_a_region_proxy_that_read_nothing_stopped_at_the_start() -> None:
    h = through_proxies(clean(), ALL, us_west=([], "bound ran out; last answer proxy_unreachable"))
    assert unavailable(h) == [
        "us-west's read proxy stopped at the start (0 records) within 15 s, short of the "
        "acknowledged end 2.0.0; bound ran out; last answer proxy_unreachable"
    ]


def test_a_region_without_a_read_through_its_proxy_is_reported() -> None:
    h = clean()
    h.add(process="proxy-final-us-east", type="ok", f="proxy-final", stream="s",
          region="us-east", records=[list(r) for r in ALL])  # fmt: skip
    assert unavailable(h) == [
        "eu-west: no read of s through its read proxy in the history",
        "us-west: no read of s through its read proxy in the history",
    ]


def test_a_history_recorded_before_reads_through_proxies_is_not_judged_by_the_rule() -> None:
    report = check(clean().ops())
    assert report.valid and report.counts()["read-unavailable"] == 0


def test_a_proxy_that_read_all_the_stream_holds_is_not_unavailable_for_a_lost_ack() -> None:
    """The highest acknowledged record is gone from the stream (`lost`, I1 broken): proxies
    that read everything the library reads are not also called unavailable."""
    h = History()
    h.send(0, "1.0.0")
    h.send(1, "1.1.0")  # acknowledged, then lost: the stream ends at 1.0.0
    h.finals([("1.0.0", 0)])
    through_proxies(h, [("1.0.0", 0)])
    assert [a.kind for a in check(h.ops()).anomalies] == ["lost"]
    through_proxies(h, [("1.0.0", 0)], us_west=([], "bound ran out"))
    assert unavailable(h) == [
        "us-west's read proxy stopped at the start (0 records) within 15 s, short of the "
        "acknowledged end 1.1.0; bound ran out"
    ]


def test_a_proxy_read_missing_the_streams_first_records_is_a_skip() -> None:
    h = through_proxies(clean(), ALL, us_east=(ALL[2:], "reached the end"))
    [skip] = [a for a in check(h.ops()).anomalies if a.kind == "poll-skip"]
    assert skip.detail == (
        "proxy-final-us-east went from the start to 1.2.0, past 2 record(s) from 1.0.0"
    )


def test_failover_check_of_a_saved_history_sees_read_unavailable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from cli.main import main

    saved = tmp_path / "history.jsonl"
    h = through_proxies(clean(), ALL, eu_west=(ALL[:1], "bound ran out"))
    saved.write_text("\n".join(encode_op(line) for line in h.lines) + "\n")
    assert main(["failover", "check", str(saved)]) == 4
    text = capsys.readouterr().out
    assert "read-unavailable            1   <-- broken guarantee" in text
    assert "eu-west's read proxy stopped at 1.0.0 (1 records)" in text
    assert main(["failover", "check", str(saved), "--json"]) == 4
    body = json.loads(capsys.readouterr().out)
    assert body["anomalies"]["read-unavailable"] == 1 and body["valid"] is False
