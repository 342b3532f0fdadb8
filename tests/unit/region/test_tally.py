"""The proxies' counters (`Tally`): summed in a dict, read by OpenTelemetry as monotonic sums
per attribute set, in the same Prometheus form as OpenTelemetry's own counters; and their
histograms (`Spread`), rendered as OpenTelemetry's own histograms are."""

from __future__ import annotations

import gc

from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import Gauge, InMemoryMetricReader, Sum
from prometheus_client import REGISTRY, generate_latest

from region.observability.telemetry import Level, Spread, Tally, _Spreads


def test_a_tally_is_collected_as_a_cumulative_sum_per_attribute_set() -> None:
    reader = InMemoryMetricReader()
    meter = MeterProvider(metric_readers=[reader]).get_meter("test")
    requests = Tally(meter, "globelog.test.requests", description="requests")
    requests.add(1, {"route": "/a", "status": 200})
    requests.add(2, {"route": "/a", "status": 200})
    requests.add(1, {"route": "/b", "status": 429})
    requests.add(5)

    def collected() -> tuple[Sum, dict[tuple[tuple[str, object], ...], float]]:
        data = reader.get_metrics_data()
        assert data is not None
        [metric] = [m for r in data.resource_metrics for s in r.scope_metrics for m in s.metrics]
        assert isinstance(metric.data, Sum)
        points = {tuple(sorted(p.attributes.items())): p.value for p in metric.data.data_points}
        return metric.data, points

    data, points = collected()
    assert data.is_monotonic
    assert points == {
        (("route", "/a"), ("status", 200)): 3,
        (("route", "/b"), ("status", 429)): 1,
        (): 5,
    }
    assert requests.total({"route": "/a", "status": 200}) == 3 and requests.total() == 5
    requests.add(4, {"route": "/b", "status": 429})
    _, points = collected()
    assert points[(("route", "/b"), ("status", 429))] == 5, "cumulative, not the change"


def test_a_tally_reads_in_prometheus_as_a_counter_does() -> None:
    provider = MeterProvider(metric_readers=[PrometheusMetricReader()])  # in REGISTRY
    meter = provider.get_meter("test")
    written = Tally(meter, "globelog.test.written.bytes", unit="By")
    counted = meter.create_counter("globelog.test.counted.bytes", unit="By")
    written.add(10, {"kind": "write"})
    counted.add(10, {"kind": "write"})
    try:
        text = generate_latest(REGISTRY).decode()
    finally:
        provider.shutdown()
    lines = {line.split("{")[0]: line for line in text.splitlines() if "globelog_test" in line}
    assert lines["# TYPE globelog_test_written_bytes_total counter"]
    written_line = lines["globelog_test_written_bytes_total"]
    assert written_line.startswith('globelog_test_written_bytes_total{kind="write"')
    assert written_line.endswith(" 10.0")
    assert written_line.replace("written", "counted") == lines["globelog_test_counted_bytes_total"]


def test_a_spread_reads_in_prometheus_as_an_opentelemetry_histogram_does() -> None:
    """The proxies' latency histograms (`Spread`) render at /metrics line for line as
    OpenTelemetry's own histogram with the same name, buckets and recordings."""
    buckets = (0.001, 0.01, 0.1, 1.0)
    provider = MeterProvider(metric_readers=[PrometheusMetricReader()])  # in REGISTRY
    meter = provider.get_meter("globelog.proxy")
    theirs = meter.create_histogram(
        "globelog.test.their.latency", unit="s", description="end to end",
        explicit_bucket_boundaries_advisory=list(buckets),
    )  # fmt: skip
    ours = Spread("globelog_test_our_latency_seconds", "end to end", buckets)
    collector = _Spreads([ours])
    REGISTRY.register(collector)
    recorded = [
        (0.0005, {"kind": "write", "route": "/a"}),
        (0.001, {"kind": "write", "route": "/a"}),  # on a bound: in that bucket
        (0.05, {"kind": "write", "route": "/a"}),
        (3.0, {"kind": "write", "route": "/a"}),  # past the last bound
        (0.2, {"kind": "read", "route": "/b"}),
    ]
    for value, attributes in recorded:
        theirs.record(value, attributes)
        ours.record(value, attributes)
    try:
        text = generate_latest(REGISTRY).decode()
    finally:
        REGISTRY.unregister(collector)
        provider.shutdown()

    def lines(name: str) -> list[str]:
        found = [line for line in text.splitlines() if f"globelog_test_{name}_latency" in line]
        return sorted(line.replace(f"_{name}_", "_x_") for line in found)

    assert lines("their") == lines("our")
    assert 'globelog_test_our_latency_seconds_bucket{kind="write",le="0.001"' in text
    assert len(lines("our")) == 2 + 2 * (len(buckets) + 3)  # help, type; per series


def test_a_spread_nothing_was_recorded_in_is_not_rendered() -> None:
    """As OpenTelemetry's histograms: a rebuilder or a console, which installs Prometheus too,
    shows no empty proxy histograms."""
    quiet, used = (
        Spread("globelog_test_quiet_seconds", "q", (1.0,)),
        Spread("globelog_test_used_seconds", "u", (1.0,)),
    )
    used.record(0.5)
    collector = _Spreads([quiet, used])
    REGISTRY.register(collector)
    try:
        text = generate_latest(REGISTRY).decode()
    finally:
        REGISTRY.unregister(collector)
    assert "globelog_test_quiet" not in text
    assert "globelog_test_used_seconds_count{" in text


def test_a_level_sums_its_live_owners_values_per_attribute_set() -> None:
    """A gauge read from its owners when collected: summed per attribute set over the owners
    still alive (a read proxy that is gone stops counting)."""
    reader = InMemoryMetricReader()
    meter = MeterProvider(metric_readers=[reader]).get_meter("test")
    held = Level(meter, "globelog.test.held.bytes", "By")

    class Owner:
        def __init__(self, cache: int, unsent: int) -> None:
            self.cache, self.unsent = cache, unsent

    first, second = Owner(100, 7), Owner(20, 0)
    for owner in (first, second):
        held.follow(owner, lambda o: o.cache, {"what": "cache"})
        held.follow(owner, lambda o: o.unsent, {"what": "unsent"})

    def collected() -> dict[tuple[tuple[str, object], ...], float]:
        data = reader.get_metrics_data()
        assert data is not None
        [metric] = [m for r in data.resource_metrics for s in r.scope_metrics for m in s.metrics]
        assert isinstance(metric.data, Gauge)
        return {tuple(p.attributes.items()): p.value for p in metric.data.data_points}

    assert collected() == {(("what", "cache"),): 120, (("what", "unsent"),): 7}
    first.unsent = 3
    assert held.value({"what": "unsent"}) == 3
    del first
    gc.collect()
    assert collected() == {(("what", "cache"),): 20, (("what", "unsent"),): 0}
