"""`globelog failover run`: the failover run (verify/run/run.py) on a running local cluster,
its history written to a file, judged by the checker, and reported for people (report.json,
the timeline plot)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from localcluster.controller import Cluster
from localcluster.tools import Tools
from verify.checker import CheckReport, check
from verify.history import Op, load_history
from verify.live.deployment import LiveDeployment
from verify.live.summary import fault_spans, latency_split, tail_coverage, timeline
from verify.run import run
from verify.run.nemesis import FAULT_KINDS, REBUILD_FAULT_KINDS
from verify.run.run import RunConfig

__all__ = ["FAULT_KINDS", "REBUILD_FAULT_KINDS", "RunConfig", "failover_run"]

REPORTED_ANOMALIES_MAX = 100  # in report.json; the history has every one


async def failover_run(
    cluster: Cluster, tools: Tools, cfg: RunConfig, progress: Callable[[str], None]
) -> tuple[Path, CheckReport]:
    """Raises WorkerFailedError when a worker failed for a reason that is no operating answer."""
    cfg.out.mkdir(parents=True, exist_ok=True)
    history_path = cfg.out / "history.jsonl"
    with history_path.open("w", encoding="utf-8") as file:
        await run.failover_run(LiveDeployment(cluster, tools), cfg, file, progress)
    history = load_history(history_path)
    report = check(history)
    _write_report(cfg, history, report)
    return history_path, report


def _write_report(cfg: RunConfig, history: list[Op], report: CheckReport) -> None:
    plot = timeline(history, cfg.out / "timeline.png", cfg.seed)
    (cfg.out / "report.json").write_text(
        json.dumps(
            {
                "timeline": str(plot),
                "send_latency_ms": latency_split(history),
                "tail_coverage": tail_coverage(history),
                "counts": report.counts(),
                "valid": report.valid,
                "operations": report.operations,
                "unavailability_s": report.unavailability_s,
                # for the console: what a reader of the report wants without the history
                "faults": [
                    {"start_s": round(a, 3), "end_s": round(b, 3), "kind": kind}
                    for a, b, kind in fault_spans(history)
                ],
                "anomalies": [a.describe() for a in report.anomalies[:REPORTED_ANOMALIES_MAX]],
                "anomalies_total": len(report.anomalies),
            },
            indent=1,
        )
    )
