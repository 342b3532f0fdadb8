"""`globelog bench proxy --compare-security`: the table read from the two reports."""

from __future__ import annotations

import pytest

from benchmarks.jit import jit_cpu_between
from benchmarks.proxies.throughput import security_table

pytestmark = pytest.mark.unit


def report(small: int, large: int, p50: float, proxy_us: float = 10.0) -> str:
    return (
        "throughput into one write proxy (us-east), ...:\n"
        "    record   records/s    MB/s  proxy CPU\n"
        f"     100 B {small:>11}     1.2        95%\n"
        f"    1024 B {large:>11}     9.9        97%\n\n"
        "CPU per record by process group (all on this machine's cores):\n"
        f"    1024 B CPU per record (us): write proxy {proxy_us}, read proxies 7.5, "
        f"bookies 40.0, ZooKeeper 2.0, total {proxy_us + 49.5}\n\n"
        f"commit latency, one 100 B record at a time ...: p50 {p50} ms, p90 9.0 ms\n"
    )


def test_the_cost_of_security_is_read_from_both_reports() -> None:
    table = security_table(
        {"tokens + TLS": [report(9000, 8000, 5.5)], "off": [report(10000, 8000, 5.0)]}
    )
    assert "100 B records/s" in table
    lines = {line.split()[0] + line.split()[1]: line for line in table.splitlines()[2:]}
    assert lines["100B"].endswith("+10.0%")
    assert lines["1024B"].endswith("+0.0%")
    assert lines["commitp50"].endswith("+0.50 ms")


def test_cpu_per_record_is_compared_by_group() -> None:
    table = security_table(
        {"tokens + TLS": [report(9000, 8000, 5.5, 15.0)], "off": [report(10000, 8000, 5.0, 10.0)]}
    )
    rows = {line[:34].strip(): line for line in table.splitlines()[2:]}
    assert rows["1024 B CPU us/rec write proxy"].split()[-3:] == ["15.0", "10.0", "+50.0%"]
    assert rows["1024 B CPU us/rec bookies"].endswith("+0.0%")
    assert rows["1024 B CPU us/rec total"].split()[-3:] == ["64.5", "59.5", "+8.4%"]
    assert not any("read proxies" in row for row in rows), "only the groups the table names"


def test_rounds_are_compared_by_their_medians() -> None:
    """Three rounds a side: one cold outlier per side does not move the table."""
    table = security_table(
        {
            "tokens + TLS": [
                report(4000, 8000, 9.0),
                report(9000, 8000, 5.5),
                report(9100, 8000, 5.4),
            ],
            "off": [report(10000, 8000, 5.0), report(12000, 8000, 5.0), report(9900, 8000, 5.2)],
        }
    )
    assert "medians of 3 rounds" in table.splitlines()[0]
    lines = {line.split()[0] + line.split()[1]: line for line in table.splitlines()[2:]}
    assert lines["100B"].split()[-3:] == ["9000.0", "10000.0", "+10.0%"]
    assert lines["commitp50"].endswith("+0.50 ms")


def test_the_compilers_cpu_between_two_samples_counts_threads_started_since_and_never_less() -> (
    None
):
    """HotSpot starts and ends compiler threads as work comes and goes: a thread started
    since the first sample counts from 0, one that ended is not taken off the total."""
    before = {(1, 10): 5.0, (1, 11): 2.0, (2, 20): 1.0}
    after = {(1, 10): 5.5, (2, 20): 1.25, (2, 21): 0.75}  # (1, 11) ended; (2, 21) started
    assert jit_cpu_between(before, after) == 1.5
    assert jit_cpu_between(after, after) == 0.0
