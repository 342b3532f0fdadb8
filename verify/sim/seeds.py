"""`globelog failover simulate`: many seeds of the deterministic simulation (verify.sim),
spread over worker processes, each judged by the failover checker; a failing seed's history
is saved for `globelog failover check` and replays with `--first SEED --seeds 1`.

Exit status 0 when every seed passed, 4 when one broke a guarantee or did not finish.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
import time
from collections import Counter
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from verify.checker import KINDS
from verify.sim.nemesis import FAULT_KINDS
from verify.sim.run import SimConfig, simulate

PROGRESS_EVERY_S = 5.0


@dataclass(frozen=True, slots=True)
class SeedOutcome:
    seed: int
    ok: bool
    anomalies: dict[str, int]
    unfinished: list[str]
    sends: int
    acknowledged: int
    faults: dict[str, int]
    history: list[str]  # kept only for a failing seed


def run_simulate_command(args: argparse.Namespace) -> int:
    faults = tuple(f for f in args.faults.split(",") if f)
    unknown = sorted(set(faults) - set(FAULT_KINDS))
    if unknown or args.seeds < 1 or args.first < 0 or args.jobs < 1:
        problems = []
        if unknown:
            problems.append(f"--faults: unknown {unknown} (expected some of {list(FAULT_KINDS)})")
        if args.seeds < 1:
            problems.append(f"--seeds {args.seeds}: expected at least 1")
        if args.first < 0:
            problems.append(f"--first {args.first}: expected a seed >= 0")
        if args.jobs < 1:
            problems.append(f"--jobs {args.jobs}: expected at least 1")
        print("globelog failover simulate: " + "; ".join(problems), file=sys.stderr)
        return 2
    seeds = range(args.first, args.first + args.seeds)
    started = time.monotonic()
    outcomes: list[SeedOutcome] = []
    last_report = started
    jobs = min(args.jobs, args.seeds)
    with multiprocessing.get_context("spawn").Pool(jobs) as pool:
        for outcome in pool.imap_unordered(partial(_one_seed, faults), seeds, chunksize=4):
            outcomes.append(outcome)
            now = time.monotonic()
            if now - last_report >= PROGRESS_EVERY_S:
                last_report = now
                failed = sum(1 for o in outcomes if not o.ok)
                print(
                    f"  {len(outcomes)}/{args.seeds} seeds, {failed} failed, "
                    f"{len(outcomes) / (now - started) * 60:.0f} seeds/min",
                    file=sys.stderr,
                    flush=True,
                )
    elapsed = time.monotonic() - started
    outcomes.sort(key=lambda o: o.seed)
    failing = [o for o in outcomes if not o.ok]
    saved = _save_failures(failing, args.out)
    summary = _summary(outcomes, elapsed, jobs, saved)
    print(json.dumps(summary, indent=2) if args.json else _text(summary))
    return 0 if not failing else 4


def _one_seed(faults: tuple[str, ...], seed: int) -> SeedOutcome:
    result = simulate(seed, SimConfig(faults=faults))
    counts = result.report.counts()
    sends = [op for op in result.history if op.f == "send" and op.type != "invoke"]
    injected = Counter(str(op.fault) for op in result.history if op.f == "fault")
    return SeedOutcome(
        seed,
        result.ok,
        {k: v for k, v in counts.items() if v},
        result.unfinished,
        len(sends),
        sum(1 for op in sends if op.type == "ok"),
        dict(injected),
        [] if result.ok else result.history_lines(),
    )


def _save_failures(failing: list[SeedOutcome], out: Path) -> list[str]:
    if not failing:
        return []
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for outcome in failing:
        path = out / f"sim-seed-{outcome.seed}.jsonl"
        path.write_text("\n".join(outcome.history) + "\n", encoding="utf-8")
        paths.append(str(path))
    return paths


def _summary(
    outcomes: list[SeedOutcome], elapsed: float, jobs: int, saved: list[str]
) -> dict[str, object]:
    anomalies = {kind: sum(o.anomalies.get(kind, 0) for o in outcomes) for kind in KINDS}
    faults: Counter[str] = Counter()
    for outcome in outcomes:
        faults.update(outcome.faults)
    return {
        "seeds": len(outcomes),
        "first_seed": outcomes[0].seed,
        "seconds": round(elapsed, 1),
        "jobs": jobs,
        "seeds_per_minute": round(len(outcomes) / elapsed * 60) if elapsed > 0 else None,
        "sends": sum(o.sends for o in outcomes),
        "acknowledged": sum(o.acknowledged for o in outcomes),
        "faults": dict(sorted(faults.items())),
        "anomalies": anomalies,
        "failed_seeds": [
            {"seed": o.seed, "anomalies": o.anomalies, "unfinished": o.unfinished[:5]}
            for o in outcomes
            if not o.ok
        ],
        "histories": saved,
    }


def _text(summary: dict[str, object]) -> str:
    lines = [
        f"seeds {summary['first_seed']}..{int(summary['first_seed']) + int(summary['seeds']) - 1}"  # type: ignore[call-overload]
        f" ({summary['seeds']}) in {summary['seconds']} s on {summary['jobs']} processes: "
        f"{summary['seeds_per_minute']} seeds/min",
        f"sends completed {summary['sends']}, acknowledged {summary['acknowledged']}",
        "faults: " + ", ".join(f"{k} {v}" for k, v in summary["faults"].items()),  # type: ignore[attr-defined]
        "anomalies (all seeds): " + ", ".join(f"{k} {v}" for k, v in summary["anomalies"].items()),  # type: ignore[attr-defined]
    ]
    failed = summary["failed_seeds"]
    if not failed:
        lines.append("every seed passed")
    for item in failed:  # type: ignore[attr-defined]
        seed = item["seed"]
        lines.append(
            f"FAILED seed {seed}: {item['anomalies']} {item['unfinished']} — replay: "
            f"globelog failover simulate --first {seed} --seeds 1 --jobs 1"
        )
    for path in summary["histories"]:  # type: ignore[attr-defined]
        lines.append(f"history: {path} (globelog failover check {path})")
    return "\n".join(lines)
