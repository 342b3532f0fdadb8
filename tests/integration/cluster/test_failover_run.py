"""A short `globelog failover run` on the real cluster with its proxies: producers and readers
in every region, faults from the cluster's controls, final reads, audits, and the checker
finding no broken guarantee."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from core.errors import ClusterError
from global_meta import MetaStore
from ledger import UnderReplication
from localcluster.controller import Cluster
from localcluster.probes import wait_until
from localcluster.tools import Tools
from rebuild.service import read_rebuilders
from tests.support.streams import fresh_namespace
from verify.checker import VIOLATIONS
from verify.history import load_history
from verify.live.run import FAULT_KINDS, RunConfig, failover_run


async def test_a_run_through_every_fault_kind_breaks_no_guarantee(
    services: Cluster, tools: Tools, tmp_path: Path
) -> None:
    """Each kind at least once (the nemesis draws every chosen kind before repeating one and
    goes on past the run's time until each came), with the run's whole report: owners and
    read proxies killed and paused, bookies killed, paused and slowed, a partition, a region
    isolated with its ZooKeeper node, a region down and back."""
    config = RunConfig(
        seed=11, seconds=60.0, faults=FAULT_KINDS, rate=12.0, namespace=fresh_namespace(),
        out=tmp_path,
    )  # fmt: skip
    history_path, report = await failover_run(services, tools, config, lambda _: None)
    history = load_history(history_path)
    injected = {op.fault for op in history if op.f == "fault"}
    assert injected == set(FAULT_KINDS), sorted(set(FAULT_KINDS) - injected)
    assert {op.f for op in history if op.process == "nemesis"} == {"fault", "heal"}
    broken = [a.describe() for a in report.anomalies if a.kind in VIOLATIONS]
    assert broken == [] and report.valid
    assert report.operations["send ok"] > 50
    assert report.operations["final ok"] == 3 * len(services.topology.region_names)
    assert report.operations["proxy-final ok"] == 3 * len(services.topology.region_names)
    assert report.operations["catch-up ok"] == 1  # every tailing reader reached the end
    for kind, windows in report.unavailability_s.items():
        assert all(w is not None for w in windows), (kind, windows)
    saved = json.loads((tmp_path / "report.json").read_text())
    assert saved["send_latency_ms"]["outside"]["count"] > 0
    for region, seen in saved["tail_coverage"].items():
        assert seen["read"] == seen["acked"] > 50, (region, seen)
    assert (tmp_path / "timeline.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


async def test_a_run_that_loses_two_bookies_for_good_keeps_every_record_and_every_copy(
    fresh_services: Cluster, tools: Tools, tmp_path: Path
) -> None:
    """wipe-two-bookies: a bookie's disk lost, its copies re-made by the cluster's rebuilders
    (the test topology's lost_bookie_delay_s is 5 s), then one of another region's: every
    acknowledged record is read back in every region, and every copy of every segment is
    there after the run (checker: no lost, no under-replicated)."""
    config = RunConfig(
        seed=5, seconds=10.0, faults=("wipe-two-bookies",), rate=10.0,
        namespace=fresh_namespace(), out=tmp_path,
    )  # fmt: skip
    history_path, report = await failover_run(fresh_services, tools, config, lambda _: None)
    history = load_history(history_path)
    [held] = [op for op in history if op.f == "held"]
    assert held.detail.count("rebuilt in") == 2, held.detail  # both within the hold's bound
    [replicas] = [op for op in history if op.f == "replicas"]
    assert replicas.value == 0, replicas.detail
    assert "nothing under-replicated" in replicas.detail
    broken = [a.describe() for a in report.anomalies if a.kind in VIOLATIONS]
    assert broken == [] and report.valid
    assert report.operations["final ok"] == 3 * len(fresh_services.topology.region_names)
    # the auditor's gauges saw the losses end: nothing short now, and a recovery timed. It
    # publishes every report_interval_s, so the status read at once may predate the check.
    seen: list[dict[str, Any]] = []
    async with await MetaStore.of(fresh_services.topology) as store:

        async def auditor_reports_none_short() -> bool:
            seen[:] = [r for r in await read_rebuilders(store) if r["auditor"]]
            return len(seen) == 1 and seen[0]["under_replicated_ledgers"] == 0

        bound_s = 5 * fresh_services.topology.rebuild.report_interval_s
        try:
            await wait_until("the auditor's gauge at 0", auditor_reports_none_short, bound_s)
        except ClusterError as err:  # which ledgers are marked now, for the diagnosis
            marked = await UnderReplication(store).marked()
            raise AssertionError(f"{err}; auditor {seen}; marked {marked}") from None
    [auditor] = seen
    assert auditor["last_recovery_s"] is not None and auditor["last_recovery_s"] > 0, auditor
