"""`globelog failover check HISTORY`: the failover checker on a recorded history (docs/failover.md).

Exit status 0 when no guarantee is broken, 4 when an anomaly breaks one (duplicates of plain
sends are reported but break none), 1 for an unreadable history.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from verify.checker import KINDS, VIOLATIONS, CheckReport, check, summarise
from verify.history import load_history


def add_failover_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    failover = commands.add_parser("failover", help="check a failover run's history")
    actions = failover.add_subparsers(dest="action", required=True)
    checker = actions.add_parser("check", help="run the checker alone on a history file")
    checker.add_argument("history", type=Path)
    checker.add_argument("--json", action="store_true")
    checker.add_argument("--show", type=int, default=10, help="anomalies shown per kind")


def run_failover_command(args: argparse.Namespace) -> int:
    report = check(load_history(args.history))
    print(report_json(report) if args.json else report_text(report, args.show))
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
    lines.append("== unavailability after each fault (to the first acknowledged send)")
    if not report.unavailability_s:
        lines.append("  no fault in the history")
    for kind, windows in sorted(report.unavailability_s.items()):
        median, top, never = summarise(windows)
        ended = "-" if median is None else f"median {median:.2f} s, max {top:.2f} s"
        tail = f", {never} never ended" if never else ""
        lines.append(f"  {kind:<22} {len(windows):>3} fault(s): {ended}{tail}")
    lines.append("valid: no guarantee broken" if report.valid else "INVALID: a guarantee broken")
    return "\n".join(lines)
