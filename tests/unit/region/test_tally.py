"""The proxies' counters (`Tally`): summed in a dict, read by OpenTelemetry as monotonic sums
per attribute set, in the same Prometheus form as OpenTelemetry's own counters."""

from __future__ import annotations

from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, Sum
from prometheus_client import REGISTRY, generate_latest

from region.observability.telemetry import Tally


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
