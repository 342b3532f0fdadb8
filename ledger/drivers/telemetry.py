"""The ledger client's OpenTelemetry instruments (the machines stay silent; drivers record).

Per STYLE, hot paths record per batch where they can: add latency is one histogram point per
entry (≈6 µs), the rest are counters per event. With no meter provider configured the
instruments are OpenTelemetry's no-ops.
"""

from __future__ import annotations

from dataclasses import dataclass

from opentelemetry import metrics

# Explicit buckets in seconds: loopback adds take ~1 ms, cross-region adds one WAN round trip.
LATENCY_BUCKETS_S = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)


@dataclass(frozen=True, slots=True)
class LedgerMetrics:
    add_latency: metrics.Histogram
    adds: metrics.Counter
    add_failures: metrics.Counter
    ensemble_changes: metrics.Counter
    read_latency: metrics.Histogram
    read_failures: metrics.Counter
    batch_read_latency: metrics.Histogram
    batch_read_entries: metrics.Counter
    recoveries: metrics.Counter
    follower_restarts: metrics.Counter

    @classmethod
    def create(cls, meter: metrics.Meter | None = None) -> LedgerMetrics:
        m = meter if meter is not None else metrics.get_meter("globelog.ledger")

        def histogram(name: str, description: str) -> metrics.Histogram:
            return m.create_histogram(
                name,
                unit="s",
                description=description,
                explicit_bucket_boundaries_advisory=list(LATENCY_BUCKETS_S),
            )

        return cls(
            add_latency=histogram("globelog.ledger.add.latency", "append to ack-quorum completion"),
            adds=m.create_counter("globelog.ledger.adds", description="entries acknowledged"),
            add_failures=m.create_counter(
                "globelog.ledger.add.failures", description="entries failed, by error code"
            ),
            ensemble_changes=m.create_counter(
                "globelog.ledger.ensemble_changes", description="ensemble changes, by outcome"
            ),
            read_latency=histogram("globelog.ledger.read.latency", "one entry read"),
            read_failures=m.create_counter(
                "globelog.ledger.read.failures", description="entry reads failed, by error code"
            ),
            batch_read_latency=histogram(
                "globelog.ledger.batch_read.latency", "one batched read (many entries, one bookie)"
            ),
            batch_read_entries=m.create_counter(
                "globelog.ledger.batch_read.entries", description="entries read by batched reads"
            ),
            recoveries=m.create_counter(
                "globelog.ledger.recoveries", description="ledger recoveries, by outcome"
            ),
            follower_restarts=m.create_counter(
                "globelog.ledger.follower.restarts",
                description="failures of a metadata watch follower, each followed by a restart",
            ),
        )
