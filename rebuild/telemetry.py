"""A rebuilder's figures as OpenTelemetry instruments, read from its worker and auditor at
each scrape (`globelog serve rebuilder --metrics-port P` serves them at /metrics).

Counters since the process started: `globelog_rebuild_bytes_copied_total`,
`globelog_rebuild_entries_copied_total`, `globelog_rebuild_fragments_rebuilt_total`,
`globelog_rebuild_ledgers_rebuilt_total`, `globelog_rebuild_ledgers_failed_total`,
`globelog_rebuild_ledgers_deferred_total`, `globelog_rebuild_ledgers_closed_total`. Gauges: `globelog_rebuild_ledgers_in_progress`,
`globelog_rebuild_copy_rate_bytes_per_second` (over the last RATE_WINDOW_S),
`globelog_rebuild_pace_bytes_per_second` (the rate the worker may copy at now),
`globelog_rebuild_auditor_leading` (1 on the elected auditor), and on the auditor only
`globelog_rebuild_lost_bookies` (missing from the registry, counted lost or not yet) and
`globelog_rebuild_under_replicated_ledgers` (marked, as of its last status report),
`globelog_rebuild_under_replicated_bytes` (their missing copies, estimated) and
`globelog_rebuild_last_recovery_seconds` (the last loss's time to full durability).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Observation

from rebuild.service import Rebuilder

Read = Callable[[Rebuilder], float]

COUNTERS: dict[str, tuple[str, Read]] = {
    "bytes.copied": ("bytes added to replacements", lambda r: r.worker.counts.bytes_copied),
    "entries.copied": ("entries added to replacements", lambda r: r.worker.counts.entries_copied),
    "fragments.rebuilt": ("fragments re-made", lambda r: r.worker.counts.fragments_rebuilt),
    "ledgers.rebuilt": ("ledgers whose marker was done", lambda r: r.worker.counts.ledgers_rebuilt),
    "ledgers.failed": (
        "ledger rebuilds that failed (retried later)",
        lambda r: r.worker.counts.ledgers_failed,
    ),
    "ledgers.deferred": (
        "ledgers left for their writer's open ensemble",
        lambda r: r.worker.counts.ledgers_deferred,
    ),
    "ledgers.closed": (
        "open ledgers closed to be rebuilt, their stream having no owner",
        lambda r: r.worker.counts.ledgers_closed,
    ),
}
GAUGES: dict[str, tuple[str, Read]] = {
    "ledgers.in_progress": ("ledgers being copied now", lambda r: len(r.worker.counts.in_progress)),
    "copy_rate": ("bytes copied per second, recently", lambda r: r.copy_rate()),
    "pace": (
        "bytes per second the worker may copy at now (its rate, yielding or fixed)",
        lambda r: r.worker.pacer.rate,
    ),
    "auditor.leading": ("1 on the elected auditor", lambda r: float(r.auditor.leading)),
    "lost_bookies": (
        "bookies of the topology missing from the registry (the auditor's view)",
        lambda r: float(len(r.auditor.counts.lost)) if r.auditor.leading else 0.0,
    ),
    "under_replicated_bytes": (
        "bytes of the marked ledgers' missing copies, estimated (refreshed every 15 s)",
        lambda r: float(r.under_replicated_bytes or 0) if r.auditor.leading else 0.0,
    ),
    "last_recovery_seconds": (
        "the last loss's time from the bookie's disappearance to nothing marked",
        lambda r: float(r.recovery.last_s or 0.0),
    ),
    "under_replicated_ledgers": (
        "ledgers marked under-replicated (the auditor's last count)",
        lambda r: float(r.under_replicated or 0) if r.auditor.leading else 0.0,
    ),
}


def observe_rebuilder(rebuilder: Rebuilder) -> None:
    """Registers the rebuilder's instruments with this process's meter provider."""
    meter = metrics.get_meter("globelog.rebuild")
    labels = {"region": rebuilder.region, "rebuilder": rebuilder.name}

    def callback(read: Read) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def observe(_: CallbackOptions) -> Iterable[Observation]:
            return [Observation(read(rebuilder), labels)]

        return observe

    for name, (description, read) in COUNTERS.items():
        unit = "By" if name == "bytes.copied" else "1"
        meter.create_observable_counter(
            f"globelog.rebuild.{name}", [callback(read)], unit=unit, description=description
        )
    for name, (description, read) in GAUGES.items():
        unit = "By/s" if name in ("copy_rate", "pace") else "1"
        meter.create_observable_gauge(
            f"globelog.rebuild.{name}", [callback(read)], unit=unit, description=description
        )
