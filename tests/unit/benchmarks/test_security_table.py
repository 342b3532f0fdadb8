"""`globelog bench proxy --compare-security`: the table read from the two reports."""

from __future__ import annotations

import pytest

from benchmarks.proxies.throughput import security_table

pytestmark = pytest.mark.unit


def report(small: int, large: int, p50: float) -> str:
    return (
        "throughput into one write proxy (us-east), ...:\n"
        "    record   records/s    MB/s  proxy CPU\n"
        f"     100 B {small:>11}     1.2        95%\n"
        f"    1024 B {large:>11}     9.9        97%\n\n"
        f"commit latency, one 100 B record at a time ...: p50 {p50} ms, p90 9.0 ms\n"
    )


def test_the_cost_of_security_is_read_from_both_reports() -> None:
    table = security_table(
        {"tokens + TLS": report(9000, 8000, 5.5), "off": report(10000, 8000, 5.0)}
    )
    assert "100 B records/s" in table
    lines = {line.split()[0] + line.split()[1]: line for line in table.splitlines()[2:]}
    assert lines["100B"].endswith("+10.0%")
    assert lines["1024B"].endswith("+0.0%")
    assert lines["commitp50"].endswith("+0.50 ms")
