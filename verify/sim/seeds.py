"""`globelog failover simulate`: many seeds of the failover run on the simulated world
(verify/sim/run.py: globelog's own proxies, rebuilders and drivers), spread over worker
processes, each judged by the failover checker; a failing seed's history is saved for
`globelog failover check`, and `--seed N --trace` replays it with what happened, in virtual
time, and the smallest history the checker still rejects.

Exit status 0 when every seed passed, 4 when one broke a guarantee or did not finish.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import time
from collections import Counter
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

from core import runtime
from verify.checker import KINDS, VIOLATIONS
from verify.minimize import minimal_history
from verify.run.nemesis import FAULT_KINDS, REBUILD_FAULT_KINDS
from verify.sim.run import SIM_FAULT_KINDS, SimConfig, SimResult, simulate

PROGRESS_EVERY_S = 10.0
KNOWN_FAULTS = (*FAULT_KINDS, *REBUILD_FAULT_KINDS)


@dataclass(frozen=True, slots=True)
class SeedOutcome:
    seed: int
    ok: bool
    anomalies: dict[str, int]
    failure: str | None
    sends: int
    acknowledged: int
    faults: dict[str, int]
    virtual_s: float
    history: list[str]  # kept only for a failing seed


def add_simulate_arguments(simulate_parser: argparse.ArgumentParser) -> None:
    """`globelog failover simulate`'s flags."""
    simulate_parser.add_argument("--seeds", type=int, default=100, help="how many seeds")
    simulate_parser.add_argument("--first", type=int, default=0, help="the first seed")
    simulate_parser.add_argument(
        "--seed", type=int, default=None, help="replay this one seed here (with --trace: how)"
    )
    simulate_parser.add_argument(
        "--trace",
        action="store_true",
        help="with --seed: the run's events and logs in virtual time, and the smallest "
        "history the checker still rejects",
    )
    simulate_parser.add_argument(
        "--faults-per-seed", type=int, default=2, help="fault kinds each seed draws"
    )
    simulate_parser.add_argument(
        "--seconds", type=float, default=12.0, help="each seed's workload, in virtual time"
    )
    simulate_parser.add_argument(
        "--rate", type=float, default=10.0, help="sends per second of each producer"
    )
    simulate_parser.add_argument("--streams", type=int, default=2, help="streams each seed writes")
    simulate_parser.add_argument(
        "--racks", type=int, default=2, help="racks in each region, a bookie in each"
    )
    simulate_parser.add_argument(
        "--broken",
        default="",
        help="guarantees the code skips on purpose, to see the simulation catch it: some of "
        + ",".join(runtime.FAULTS),
    )
    simulate_parser.add_argument(
        "--jobs", type=int, default=os.cpu_count() or 1, help="worker processes"
    )
    simulate_parser.add_argument(
        "--faults", default=",".join(SIM_FAULT_KINDS), help="fault kinds the nemesis draws from"
    )
    simulate_parser.add_argument(
        "--out", type=Path, default=Path("failover-sim"), help="where failing histories go"
    )
    simulate_parser.add_argument("--json", action="store_true", help="the summary as JSON")


def config_of(args: argparse.Namespace) -> SimConfig | str:
    """The simulation's settings from the command line, or what is wrong with it."""
    faults = tuple(f for f in args.faults.split(",") if f)
    broken = tuple(f for f in args.broken.split(",") if f)
    problems = []
    if unknown := sorted(set(faults) - set(KNOWN_FAULTS)):
        problems.append(f"--faults: unknown {unknown} (expected some of {list(KNOWN_FAULTS)})")
    if not faults:
        problems.append("--faults: expected at least one fault kind")
    if unknown := sorted(set(broken) - set(runtime.FAULTS)):
        problems.append(f"--broken: unknown {unknown} (expected some of {list(runtime.FAULTS)})")
    for name, least in (
        ("seeds", 1), ("first", 0), ("jobs", 1), ("faults_per_seed", 1), ("streams", 1),
        ("seconds", 1), ("rate", 0.1), ("racks", 2),
    ):  # fmt: skip
        if getattr(args, name) < least:
            flag = "--" + name.replace("_", "-")
            problems.append(f"{flag} {getattr(args, name)}: expected at least {least}")
    if args.seed is not None and args.seed < 0:
        problems.append(f"--seed {args.seed}: expected a seed >= 0")
    if problems:
        return "; ".join(problems)
    return SimConfig(
        faults=faults,
        faults_per_seed=args.faults_per_seed,
        seconds=args.seconds,
        rate=args.rate,
        streams=args.streams,
        racks=args.racks,
        broken=broken,
    )


def run_simulate_command(args: argparse.Namespace) -> int:
    config = config_of(args)
    if isinstance(config, str):
        print(f"globelog failover simulate: {config}", file=sys.stderr)
        return 2
    if args.seed is not None:
        return _replay(args.seed, config, args.trace)
    seeds = range(args.first, args.first + args.seeds)
    started = time.monotonic()
    outcomes: list[SeedOutcome] = []
    last_report = started
    jobs = min(args.jobs, args.seeds)
    print(
        f"globelog failover simulate: seeds {seeds.start}..{seeds.stop - 1} on {jobs} processes",
        file=sys.stderr,
        flush=True,
    )
    with multiprocessing.get_context("spawn").Pool(jobs) as pool:
        for outcome in pool.imap_unordered(partial(_one_seed, config), seeds, chunksize=1):
            outcomes.append(outcome)
            now = time.monotonic()
            if now - last_report >= PROGRESS_EVERY_S or len(outcomes) == args.seeds:
                last_report = now
                failed = sum(1 for o in outcomes if not o.ok)
                print(
                    f"  {len(outcomes)}/{args.seeds} seeds, {failed} failed, "
                    f"{len(outcomes) / (now - started) * 60:.1f} seeds/min",
                    file=sys.stderr,
                    flush=True,
                )
    elapsed = time.monotonic() - started
    outcomes.sort(key=lambda o: o.seed)
    failing = [o for o in outcomes if not o.ok]
    saved = _save_failures(failing, args.out)
    summary = _summary(outcomes, elapsed, jobs, config, saved)
    print(json.dumps(summary, indent=2) if args.json else _text(summary))
    return 0 if not failing else 4


def _one_seed(config: SimConfig, seed: int) -> SeedOutcome:
    return outcome_of(simulate(seed, config))


def outcome_of(result: SimResult) -> SeedOutcome:
    counts = result.report.counts()
    sends = [op for op in result.history if op.f == "send" and op.type != "invoke"]
    injected = Counter(str(op.fault) for op in result.history if op.f == "fault")
    return SeedOutcome(
        result.seed,
        result.ok,
        {k: v for k, v in counts.items() if v},
        result.failure,
        len(sends),
        sum(1 for op in sends if op.type == "ok"),
        dict(injected),
        result.virtual_s,
        [] if result.ok else result.lines,
    )


def _replay(seed: int, config: SimConfig, trace: bool) -> int:
    """One seed in this process; with `trace`, what happened as it happened (virtual time), and
    for each kind of broken guarantee the smallest history the checker still rejects."""
    shown = partial(print, flush=True) if trace else None
    started = time.monotonic()
    result = simulate(seed, replace(config, trace=shown))
    elapsed = time.monotonic() - started
    print(
        f"seed {seed}: faults {', '.join(result.faults)}; {result.virtual_s:.1f} s virtual in "
        f"{elapsed:.1f} s; {'passed' if result.ok else 'FAILED'}"
        + (f"; broken on purpose: {', '.join(config.broken)}" if config.broken else "")
    )
    if result.failure:
        print(f"the run stopped: {result.failure}")
    seen: set[str] = set()
    for anomaly in result.report.anomalies:
        print(f"anomaly {anomaly.describe()}")
        if not trace or anomaly.kind in seen or anomaly.kind not in VIOLATIONS:
            continue
        seen.add(anomaly.kind)
        smallest = minimal_history(result.history, anomaly.kind, anomaly.stream)
        print(f"the smallest history still rejected for {anomaly.kind} ({len(smallest)} ops):")
        for op in smallest:
            print(f"  {op.time:9.3f} s  {op.describe()}" + (f"  {op.detail}" if op.detail else ""))
    return 0 if result.ok else 4


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
    outcomes: list[SeedOutcome], elapsed: float, jobs: int, config: SimConfig, saved: list[str]
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
        "seeds_per_minute": round(len(outcomes) / elapsed * 60, 1) if elapsed > 0 else None,
        "virtual_seconds": round(sum(o.virtual_s for o in outcomes), 1),
        "broken": list(config.broken),
        "shape": (
            f"{config.streams} streams x 3 regions, {config.rate:g} sends/s a producer, "
            f"{config.seconds:g} s of workload, {config.faults_per_seed} fault kinds a seed, "
            f"{config.racks} bookies a region"
        ),
        "sends": sum(o.sends for o in outcomes),
        "acknowledged": sum(o.acknowledged for o in outcomes),
        "faults": dict(sorted(faults.items())),
        "anomalies": anomalies,
        "failed_seeds": [
            {"seed": o.seed, "anomalies": o.anomalies, "failure": o.failure}
            for o in outcomes
            if not o.ok
        ],
        "histories": saved,
    }


def _text(summary: dict[str, object]) -> str:
    first, count = int(summary["first_seed"]), int(summary["seeds"])  # type: ignore[call-overload]
    lines = [
        f"seeds {first}..{first + count - 1} ({count}) in {summary['seconds']} s on "
        f"{summary['jobs']} processes: {summary['seeds_per_minute']} seeds/min "
        f"({summary['virtual_seconds']} s of virtual time)",
        f"each seed: {summary['shape']}",
        f"sends completed {summary['sends']}, acknowledged {summary['acknowledged']}",
        "faults: " + ", ".join(f"{k} {v}" for k, v in summary["faults"].items()),  # type: ignore[attr-defined]
        "anomalies (all seeds): " + ", ".join(f"{k} {v}" for k, v in summary["anomalies"].items()),  # type: ignore[attr-defined]
    ]
    if summary["broken"]:
        lines.append(f"broken on purpose: {', '.join(summary['broken'])}")  # type: ignore[arg-type]
    failed = summary["failed_seeds"]
    if not failed:
        lines.append("every seed passed")
    broken = "".join(f" --broken {b}" for b in summary["broken"])  # type: ignore[attr-defined]
    for item in failed:  # type: ignore[attr-defined]
        lines.append(
            f"FAILED seed {item['seed']}: {item['anomalies']} {item['failure'] or ''} — replay: "
            f"globelog failover simulate --seed {item['seed']} --trace{broken}"
        )
    for path in summary["histories"]:  # type: ignore[attr-defined]
        lines.append(f"history: {path} (globelog failover check {path})")
    return "\n".join(lines)
