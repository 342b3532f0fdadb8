"""`globelog bench spark`: its flags, the payload sizes it writes, and the order of its reads
(every source meets the JVM as warm as the others)."""

from __future__ import annotations

import statistics
from typing import Any

import pytest

from benchmarks.spark import sources as read_bench
from benchmarks.spark.bench import SparkWorkload, _tail, run
from benchmarks.spark.sources import TimedSource, interleaved_reads
from cli.main import _parser
from core.errors import ConfigError

pytestmark = pytest.mark.unit


def test_every_bad_flag_is_reported_at_once() -> None:
    args = _parser().parse_args(
        ["bench", "spark", "--records", "5", "--size", "40", "--size-spread", "29", "--cores", "0"]
    )
    with pytest.raises(ConfigError) as caught:
        run(args)
    message = str(caught.value)
    for expected in (
        "--records 5: expected 1000..50000000",
        "--size-spread 29: expected 0..28 (--size - 12)",
        "--cores 0: expected 1..64",
    ):
        assert expected in message


def test_payloads_spread_evenly_around_the_size() -> None:
    spread = SparkWorkload(10_000, 100, 3, 50, 2, 2048, "us-east")
    sizes = [12 + _tail(spread, i) for i in range(10_000)]
    assert min(sizes) == 50 and max(sizes) == 150
    assert abs(statistics.mean(sizes) - 100) < 1
    one = SparkWorkload(10_000, 100, 3, 0, 2, 2048, "us-east")
    assert {12 + _tail(one, i) for i in range(1000)} == {100}


class Frame:
    """Stands for a DataFrame: its partition count, and the read it stands for."""

    def __init__(self, name: str, log: list[str]) -> None:
        self.name, self.log = name, log
        self.rdd = self

    def getNumPartitions(self) -> int:  # noqa: N802 (Spark's name)
        return 2


def test_reads_are_taken_in_rounds_after_a_warm_up_of_each(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    log: list[str] = []

    def touch(df: Any) -> tuple[int, int]:
        log.append(df.name)
        return 1000, 100_000

    monkeypatch.setattr(read_bench, "touch_every_column", touch)
    clock = iter(range(100))
    sources = [
        TimedSource(name, lambda name=name: Frame(name, log))  # type: ignore[misc]
        for name in ("bookies", "parquet", "api-limit")
    ]
    interleaved_reads(sources, 2, lambda: next(clock), lambda line: None)
    assert log == ["bookies", "parquet", "api-limit"] * 3  # a warm-up round, then two
    assert [len(s.seconds) for s in sources] == [2, 2, 2]
    assert all(s.partitions == 2 and s.records == 1000 and s.payload == 100_000 for s in sources)
    assert [s.measured for s in sources] == [2, 2, 2]  # the clock moved once around each read
