"""`globelog bench reads`: its flags and its reading of the Java benchmark's output."""

from __future__ import annotations

import pytest

from benchmarks.reads import parse_java_read, run
from cli.main import _parser
from core.errors import ConfigError


def test_every_bad_flag_is_reported_at_once() -> None:
    args = _parser().parse_args(
        ["bench", "reads", "--entries", "5", "--batch-entries", "0", "--repeat", "99"]
    )
    with pytest.raises(ConfigError) as caught:
        run(args)
    message = str(caught.value)
    for expected in (
        "--entries 5: expected 1000..10000000",
        "--batch-entries 0: expected 1..100000",
        "--repeat 99: expected 1..20",
    ):
        assert expected in message


def test_the_java_figure_is_its_read_line() -> None:
    text = (
        "2026-11-25T11:01:04,010 - INFO  - [main:ZooKeeper@637] - Initiating client connection\n"
        "READ 100000 102400000 3412000000\n"
        "2026-11-25T11:01:08,010 - INFO  - [main:BookKeeper@1400] - closed\n"
    )
    assert parse_java_read(text) == (100000, 3412000000)
    assert (
        parse_java_read("Exception in thread main\n  READ 1 2 3 (not a line of its own)\n") is None
    )
