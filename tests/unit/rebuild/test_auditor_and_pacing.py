"""What the auditor marks for a ledger, and the rebuilders' byte pacing."""

from __future__ import annotations

import pytest

from core.errors import ConfigError
from core.settings.rebuild_settings import RebuildSettings, parse_rebuild
from core.topology import Replication
from ledger.codecs.entry import DigestType
from ledger.codecs.metadata import Ensemble, LedgerMetadata, LedgerState
from placement import LocatedBookie
from rebuild.auditor import to_rebuild
from rebuild.pacing import (
    BASE_BUCKET_S,
    BASE_BUCKETS,
    BOOKIES_KEPT_MAX,
    CUT_EVERY_S,
    RECENT_SAMPLES,
    Pacer,
    YieldingPacer,
    pacer_of,
)
from rebuild.service import RecoveryTimer

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


def test_a_yielding_pacer_starts_low_grows_while_nothing_queues_and_cuts_when_it_does() -> None:
    now = [0.0]
    pacer = YieldingPacer(100_000_000, 1_000_000, 0.005, clock=lambda: now[0])
    assert pacer.rate == 1_000_000  # the floor first
    for _ in range(6):  # a twentieth of the ceiling per second while adds take their base
        now[0] += 1.0
        pacer.observe("b1", 0.010)
    assert pacer.rate == pytest.approx(31_000_000)
    for _ in range(RECENT_SAMPLES):
        pacer.observe("b1", 0.014)  # 4 ms of queueing: under the 5 ms yield
    assert pacer.rate >= 31_000_000 and pacer.cuts == 0
    for _ in range(RECENT_SAMPLES - 1):
        pacer.observe("b1", 0.030)  # one add at 14 ms among the last few: jitter, not a queue
    assert pacer.cuts == 0
    pacer.observe("b1", 0.030)  # 20 ms queued on each of the last few: cut
    assert pacer.rate == pytest.approx(31_000_000 * 0.7) and pacer.cuts == 1
    pacer.observe("b1", 0.030)  # the same episode: one cut only
    assert pacer.cuts == 1
    now[0] += CUT_EVERY_S
    pacer.observe("b1", 0.030)
    assert pacer.rate == pytest.approx(31_000_000 * 0.49) and pacer.cuts == 2
    for _ in range(100):  # queueing on and on: never below the floor
        now[0] += CUT_EVERY_S
        pacer.observe("b1", 0.050)
    assert pacer.rate == 1_000_000
    rate = pacer.rate
    for _ in range(RECENT_SAMPLES - 1):
        pacer.observe("b1", 0.010)
    now[0] += 1.0
    pacer.observe("b1", 0.010)
    assert pacer.rate == pytest.approx(rate + 5_000_000)
    for _ in range(40):
        now[0] += 1.0
        pacer.observe("b1", 0.010)
    assert pacer.rate == 100_000_000  # never above the ceiling
    assert pacer.burst == 10_000_000  # a tenth of a second's worth
    assert pacer.batch_bytes == 4 * 1024 * 1024  # batched reads: at most the fixed pace's
    slow = YieldingPacer(100_000_000, 1_000_000, 0.005, clock=lambda: now[0])
    assert slow.batch_bytes == 100_000  # a tenth of a second's worth at the floor
    assert YieldingPacer(10**8, 100_000, 0.005, clock=lambda: 0.0).batch_bytes == 64 * 1024


def test_each_bookies_base_is_its_own_recent_least() -> None:
    now = [0.0]
    pacer = YieldingPacer(100_000_000, 1_000_000, 0.005, clock=lambda: now[0])
    pacer.observe("near", 0.002)
    pacer.observe("far", 0.080)  # a remote region's round trip is its base, not queueing
    pacer.observe("far", 0.083)
    assert pacer.cuts == 0 and pacer.base("far") == 0.080
    for _ in range(RECENT_SAMPLES):
        pacer.observe("near", 0.012)
    assert pacer.cuts == 1
    now[0] += BASE_BUCKET_S * BASE_BUCKETS  # the old least is forgotten: the base moves up
    pacer.observe("far", 0.090)
    assert pacer.base("far") == 0.090
    for i in range(BOOKIES_KEPT_MAX + 10):  # I10: bases of bookies long gone are let go
        pacer.observe(f"b{i}", 0.001)
    assert pacer.base("far") is None and pacer.base(f"b{BOOKIES_KEPT_MAX + 9}") == 0.001


def test_the_settings_choose_a_fixed_or_a_yielding_pacer() -> None:
    assert type(pacer_of(1000, 100, 0.0, clock=lambda: 0.0)) is Pacer
    yielding = pacer_of(1000, 5000, 0.005, clock=lambda: 0.0)
    assert isinstance(yielding, YieldingPacer) and yielding.floor == 1000  # floor <= ceiling


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
    with pytest.raises(ConfigError, match=r"yield_delay_s = -0.1 \(expected >= 0\)"):
        RebuildSettings(yield_delay_s=-0.1)
    assert parse_rebuild({"yield_delay_s": 0, "rate_min_bytes_s": 1}, Collect()) == RebuildSettings(
        yield_delay_s=0.0, rate_min_bytes_s=1
    )
    assert parse_rebuild({"shared_pace": False}, Collect()) == RebuildSettings(shared_pace=False)
    assert parse_rebuild({"shared_pace": 1}, Collect()) is None
    assert problems[-1] == ("rebuild.shared_pace", "expected true or false, got 1")


def test_a_shared_pace_gives_each_rebuilder_its_share_and_takes_it_back() -> None:
    """Three rebuilders copying: each at a third of the ceiling, the floor and its rate, so
    together they copy as one would; alone again, the whole."""
    now = [0.0]
    pacer = YieldingPacer(90_000_000, 3_000_000, 0.005, clock=lambda: now[0])
    pacer.rate = 30_000_000.0
    pacer.share(3)
    assert (pacer.shares, pacer.ceiling, pacer.floor) == (3, 30_000_000, 1_000_000)
    assert pacer.rate == pytest.approx(10_000_000)
    assert pacer.burst == 1_000_000  # a tenth of a second's worth, of the share
    for _ in range(200):  # no queueing for long: it grows to its share's ceiling, not past
        now[0] += 0.5
        pacer.observe("b1", 0.001)
    assert pacer.rate == pytest.approx(30_000_000)
    for _ in range(100):  # queueing: down to its share's floor, not below
        now[0] += 1.0
        pacer.observe("b1", 0.050)
    assert pacer.rate == pytest.approx(1_000_000)
    pacer.share(1)
    assert (pacer.ceiling, pacer.floor, pacer.rate) == (90_000_000, 3_000_000, 3_000_000)
    pacer.share(0)  # (nobody copying: itself still counts)
    assert pacer.shares == 1
    fixed = Pacer(8_000_000, clock=lambda: 0.0)
    fixed.share(4)
    assert (fixed.rate, fixed.burst) == (2_000_000, 2_000_000)


def test_a_recovery_faster_than_a_count_is_timed_from_the_loss() -> None:
    """A rebuild that ends between two status counts (markers made and deleted within it)
    still ends a loss's recovery, timed from the bookie's disappearance; a second loss is
    timed from its own, not from the first bookie still missing."""
    timer = RecoveryTimer()
    timer.count(0, 0, {}, now=10.0)
    assert timer.last_s is None, "nothing was ever short"
    timer.count(0, 3, {"b1": 12.0}, now=20.0)  # 3 marked and rebuilt since the last count
    assert timer.last_s == 8.0
    timer.count(2, 5, {"b1": 12.0, "b2": 30.0}, now=35.0)
    assert timer.last_s == 8.0, "still short"
    timer.count(1, 5, {"b1": 12.0, "b2": 30.0}, now=40.0)
    timer.count(0, 5, {"b1": 12.0, "b2": 30.0}, now=44.5)
    assert timer.last_s == 14.5
    timer.count(0, 5, {"b1": 12.0, "b2": 30.0}, now=50.0)
    assert timer.last_s == 14.5, "no new mark: no new recovery"
    timer.count(1, 6, {}, now=60.0)  # marked by a full check, no bookie lost
    timer.count(0, 6, {}, now=62.0)
    assert timer.last_s == 2.0
