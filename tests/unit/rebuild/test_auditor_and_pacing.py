"""What the auditor marks for a ledger, and the rebuilders' byte pacing."""

from __future__ import annotations

import pytest

from core.errors import ConfigError
from core.rebuild_settings import RebuildSettings, parse_rebuild
from core.topology import Replication
from ledger.codecs.entry import DigestType
from ledger.codecs.metadata import Ensemble, LedgerMetadata, LedgerState
from placement import LocatedBookie
from rebuild.auditor import to_rebuild
from rebuild.pacing import Pacer

LOCATED = {
    b: LocatedBookie(b, region, rack)
    for b, region, rack in (
        ("e1", "us-east", "a"), ("e2", "us-east", "b"), ("w1", "us-west", "a"),
        ("w2", "us-west", "b"), ("u1", "eu-west", "a"), ("u2", "eu-west", "b"),
    )
}  # fmt: skip


def ledger(*ensembles: tuple[str, ...]) -> LedgerMetadata:
    history = tuple(Ensemble(i * 10, e) for i, e in enumerate(ensembles))
    return LedgerMetadata(4, 4, 3, history, DigestType.CRC32C, b"pw", LedgerState.CLOSED, 25, 9)


def replication(_: LedgerMetadata) -> Replication:
    return Replication(4, 4, 3, 2)


def test_lost_and_unknown_members_are_marked() -> None:
    md = ledger(("e1", "w1", "u1", "e2"), ("e1", "w1", "zz", "e2"))
    assert to_rebuild(md, {"w1"}, LOCATED, replication) == ("w1", "zz")
    assert to_rebuild(md, set(), LOCATED, replication) == ("zz",)


def test_an_ensemble_breaking_the_rule_marks_a_member_of_its_most_crowded_region() -> None:
    # three copies in us-east: an ack quorum of three can sit in one region
    md = ledger(("e1", "e2", "w1", "e1x"))
    located = {**LOCATED, "e1x": LocatedBookie("e1x", "us-east", "c")}
    assert to_rebuild(md, set(), located, replication) == ("e1x",)
    assert to_rebuild(ledger(("e1", "w1", "u1", "e2")), set(), LOCATED, replication) == ()


async def test_the_pacer_holds_the_rate_and_lets_a_burst_through() -> None:
    now = [0.0]
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    pacer = Pacer(1000, burst_bytes=500, clock=lambda: now[0], sleep=sleep)
    await pacer(500)  # the burst
    assert slept == []
    await pacer(1000)  # 1000 bytes of debt at 1000 B/s
    assert slept == [pytest.approx(1.0)]
    now[0] += 10  # idle: the bucket refills to its burst only
    await pacer(700)
    assert slept[-1] == pytest.approx(0.2)


def test_rebuild_settings_are_checked() -> None:
    problems: list[tuple[str, str]] = []

    class Collect:
        def add(self, path: str, message: str) -> None:
            problems.append((path, message))

    assert parse_rebuild(None, Collect()) == RebuildSettings()
    parsed = parse_rebuild({"lost_bookie_delay_s": 5, "ledgers_at_once": 2}, Collect())
    assert parsed == RebuildSettings(lost_bookie_delay_s=5.0, ledgers_at_once=2)
    assert parse_rebuild({"rate_bytes_s": 1.5, "nope": 1}, Collect()) is None
    assert [p for p, _ in problems] == ["rebuild.rate_bytes_s", "rebuild.nope"]
    assert parse_rebuild({"ledgers_at_once": 0}, Collect()) is None
    assert "ledgers_at_once = 0" in problems[-1][1]
    with pytest.raises(ConfigError, match="lost_bookie_delay_s"):
        RebuildSettings(lost_bookie_delay_s=-1)
