"""`globelog failover run|check|simulate`: the failover checker on a recorded history, the live
run that records one on a running cluster, the simulation (docs/failover.md).

Exit status 0 when no guarantee is broken, 4 when an anomaly breaks one (duplicates of plain
sends are reported but break none), 1 for an unreadable history or bad flags, 3 when a live
run's worker failed for a reason that is no operating answer, or a fault could not be healed
(its cause is printed), 130 when the run is interrupted (Ctrl-C), even as workers fail.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path

from core.errors import ConfigError
from verify.checker import KINDS, VIOLATIONS, CheckReport, check
from verify.history import load_history
from verify.live.run import FAULT_KINDS, REBUILD_FAULT_KINDS
from verify.liveness import summarise
from verify.sim.seeds import add_simulate_arguments, run_simulate_command


def add_failover_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    failover = commands.add_parser("failover", help="check a failover run's history")
    actions = failover.add_subparsers(dest="action", required=True)
    runner = actions.add_parser(
        "run", help="workload + nemesis + checker on the running cluster (with its proxies)"
    )
    runner.add_argument("--topology", default=None)
    runner.add_argument("--data-dir", default=os.environ.get("GLOBELOG_DATA_DIR"))
    runner.add_argument("--seed", type=int, default=1)
    runner.add_argument("--time", default="60s", help="how long the workload runs")
    runner.add_argument("--faults", default=",".join(FAULT_KINDS))
    runner.add_argument(
        "--rate", type=float, default=20.0, help="sends/s per region, spread over the streams"
    )
    runner.add_argument(
        "--out",
        type=Path,
        default=None,
        help="where the history, report and plot go (default: the data dir's "
        "failover-runs/run-UTCTIME-seedN, where the web console lists them)",
    )
    add_simulate_command(actions)
    checker = actions.add_parser("check", help="run the checker alone on a history file")
    checker.add_argument("history", type=Path)
    checker.add_argument("--json", action="store_true")
    checker.add_argument("--show", type=int, default=10, help="anomalies shown per kind")


def run_failover_command(args: argparse.Namespace) -> int:
    if args.action == "run":
        return _run(args)
    if args.action == "simulate":
        return run_simulate_command(args)
    report = check(load_history(args.history))
    print(report_json(report) if args.json else report_text(report, args.show))
    return 0 if report.valid else 4


def _run(args: argparse.Namespace) -> int:
    from cli.stream_args import duration_s
    from localcluster import processes
    from localcluster.controller import Cluster
    from localcluster.tools import REPO_ROOT, find_tools
    from localcluster.topology_files import load_local_topology
    from region.process import event_loop
    from verify.live.run import RunConfig, failover_run
    from verify.run.recorder import WorkerFailedError

    data_dir = Path(args.data_dir or REPO_ROOT / ".cluster").resolve()
    meta = processes.load_meta(data_dir)
    topology_path = Path(args.topology or meta.get("topology") or REPO_ROOT / "topology.yaml")
    topology = load_local_topology(topology_path)
    faults = tuple(f.strip() for f in args.faults.split(",") if f.strip())
    known = (*FAULT_KINDS, *REBUILD_FAULT_KINDS)
    problems = [f"--faults: {f!r} is not one of {list(known)}" for f in faults
                if f not in known]  # fmt: skip
    seconds = duration_s(args.time)
    if not 10 <= seconds <= 86_400:
        problems.append(f"--time {args.time!r}: expected 10s..24h")
    if not 0.1 <= args.rate <= 1000:
        problems.append(f"--rate {args.rate}: expected 0.1..1000 sends/s")
    if not faults:
        problems.append("--faults: expected at least one kind")
    if problems:
        raise ConfigError("failover run: " + "; ".join(problems))
    profile = meta.get("profile") or topology.emulated_wan.default_profile
    cluster = Cluster(topology, topology_path.resolve(), data_dir, profile, services=True)

    def progress(line: str) -> None:
        print(f"globelog failover run: {line}", file=sys.stderr, flush=True)

    if args.out is None:
        stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
        args.out = data_dir / "failover-runs" / f"run-{stamp}-seed{args.seed}"
    cfg = RunConfig(args.seed, seconds, faults, args.rate, out=args.out)
    progress(f"namespace {cfg.namespace}; history in {args.out}")

    try:
        history, report = event_loop.run(failover_run(cluster, find_tools(), cfg, progress))
    except WorkerFailedError as failed:
        for worker, cause in failed.causes:
            progress(f"{worker} failed:")
            traceback.print_exception(cause, file=sys.stderr)
        progress(f"{failed}; the history up to then is in {args.out / 'history.jsonl'}")
        return 3
    print(report_text(report, 5))
    latency = json.loads((args.out / "report.json").read_text())["send_latency_ms"]
    for name, figures in latency.items():
        shown = ", ".join(f"{k} {v}" for k, v in figures.items())
        print(f"  send latency {name} faults (ms): {shown}")
    print(
        f"history: {history}; report: {args.out / 'report.json'}; plot: {args.out / 'timeline.png'}"
    )
    return 0 if report.valid else 4


def report_json(report: CheckReport) -> str:
    return json.dumps(
        {
            "valid": report.valid,
            "operations": report.operations,
            "anomalies": report.counts(),
            "examples": [
                {"kind": a.kind, "stream": a.stream, "detail": a.detail,
                 "ops": [op.index for op in a.ops]}
                for a in report.anomalies
            ],
            "unavailability_s": {
                kind: dict(zip(("median", "max", "never_ended"), summarise(windows), strict=True))
                for kind, windows in report.unavailability_s.items()
            },
        },
        indent=1,
        sort_keys=True,
    )  # fmt: skip


def report_text(report: CheckReport, show: int) -> str:
    lines = ["== operations"]
    lines += [f"  {name:<14} {count:>8}" for name, count in report.operations.items()]
    lines.append("== anomalies (each 0 is a result)")
    counts = report.counts()
    for kind in KINDS:
        mark = "" if counts[kind] == 0 or kind not in VIOLATIONS else "   <-- broken guarantee"
        lines.append(f"  {kind:<22} {counts[kind]:>6}{mark}")
        shown = [a for a in report.anomalies if a.kind == kind][:show]
        lines += [f"      {a.describe()}" for a in shown]
    lines.append(
        "== unavailability per fault (longest time a stream went without an acknowledged send)"
    )
    if not report.unavailability_s:
        lines.append("  no fault in the history")
    for kind, windows in sorted(report.unavailability_s.items()):
        median, top, never = summarise(windows)
        ended = "-" if median is None else f"median {median:.2f} s, max {top:.2f} s"
        tail = f", {never} never ended" if never else ""
        lines.append(f"  {kind:<22} {len(windows):>3} fault(s): {ended}{tail}")
    lines.append("valid: no guarantee broken" if report.valid else "INVALID: a guarantee broken")
    return "\n".join(lines)


def add_simulate_command(actions: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    add_simulate_arguments(
        actions.add_parser(
            "simulate", help="the failover run on globelog's own code over a simulated world"
        )
    )
