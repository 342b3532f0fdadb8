"""One seed of the failover run (verify/run/run.py) on the simulated world, with globelog's own
proxies, rebuilders, drivers, writers, readers, ownership and idempotence running over it.

The run is the one `globelog failover run` makes on the local cluster: producers in every
region (half of them idempotent) and tailing readers through the proxies, a nemesis, final
reads through every region's read proxy and through the library, the ensemble audits, a full
check by the rebuilders and the copy audit, and the checker on the history. A seed draws which fault kinds its nemesis applies (two by default),
and everything else from there: the simulated loop's virtual time, jitter, the faults'
targets. `simulate(seed)` is deterministic: the same seed gives the same history, to the byte.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import random
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field

from core import runtime
from verify.checker import CheckReport, check
from verify.history import Op, read_history
from verify.run.nemesis import FAULT_KINDS
from verify.run.recorder import WorkerFailedError
from verify.run.run import RunConfig, failover_run
from verify.sim.deployment import SimDeployment
from verify.sim.io.cluster import Shape, SimCluster
from verify.sim.io.loop import SimulationError, current_host, run

# every live fault kind; a lost disk (`--faults wipe-bookie`) holds a seed until the rebuilders
# re-made its copies, past lost_bookie_delay_s (60 s of virtual time): asked for, not drawn
SIM_FAULT_KINDS = FAULT_KINDS
REGISTER_S = 1.0  # the proxies' first session and registration, before the workload
BOUND_S = 900.0  # virtual: a seed that has not ended by then is a hang (a finding)


@dataclass(frozen=True, slots=True)
class SimConfig:
    faults: tuple[str, ...] = SIM_FAULT_KINDS
    faults_per_seed: int = 2  # drawn from `faults` by the seed
    seconds: float = 12.0  # the workload's virtual time
    rate: float = 10.0  # sends per second per producer
    streams: int = 2
    racks: int = 2  # racks a region, a bookie each
    broken: tuple[str, ...] = ()  # core.runtime faults switched on in the real code
    trace: Callable[[str], None] | None = None  # the run's progress lines, with virtual time


@dataclass(slots=True)
class SimResult:
    seed: int
    faults: tuple[str, ...]
    history: list[Op]
    report: CheckReport
    lines: list[str]  # the history as recorded (JSON lines)
    failure: str | None = None  # the run itself stopped: a worker failed, or it hung
    virtual_s: float = 0.0
    events: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.report.valid and self.failure is None


# History ops a trace shows as they are written (besides every send and poll that failed)
TRACED = frozenset(
    {"fault", "held", "heal", "catch-up", "proxy-final", "final", "audit", "replicas"}
)


class _TracedHistory(io.StringIO):
    """The history, with its notable ops shown on the trace as they are recorded."""

    def __init__(self, trace: Callable[[str], None]) -> None:
        super().__init__()
        self._trace = trace

    def write(self, text: str) -> int:
        for line in text.splitlines():
            op = json.loads(line)
            if op["f"] in TRACED or op["type"] in ("fail", "info"):
                shown = {k: v for k, v in op.items() if k not in ("time", "records")}
                if "records" in op:
                    shown["records"] = len(op["records"])
                self._trace(f"{_now():9.3f} s  history: {json.dumps(shown, sort_keys=True)}")
        return super().write(text)


class _TraceLogs(logging.Handler):
    """The real code's log lines on the trace, with the virtual time and the host they ran on."""

    def __init__(self, trace: Callable[[str], None]) -> None:
        super().__init__(logging.INFO)
        self._trace = trace

    def emit(self, record: logging.LogRecord) -> None:
        host = current_host()
        where = host.name if host is not None else "world"
        self._trace(f"{_now():9.3f} s  {where}: {record.levelname.lower()} {record.name}: "
                    f"{record.getMessage()}")  # fmt: skip


def _where(err: BaseException) -> str:
    """The exception and the line of globelog's code it came from."""
    frames = traceback.extract_tb(err.__traceback__)
    ours = [
        f for f in frames if "/site-packages/" not in f.filename and "asyncio" not in f.filename
    ]
    at = ours[-1] if ours else (frames[-1] if frames else None)
    return f"{type(err).__name__}: {err}" + (f" ({at.filename}:{at.lineno})" if at else "")


def _now() -> float:
    loop = asyncio._get_running_loop()
    return 0.0 if loop is None else loop.time()


def faults_of(seed: int, config: SimConfig) -> tuple[str, ...]:
    """The fault kinds the seed's nemesis applies, each once at least."""
    chosen = random.Random(seed).sample(
        config.faults, min(config.faults_per_seed, len(config.faults))
    )
    return tuple(chosen)


def simulate(seed: int, config: SimConfig | None = None) -> SimResult:
    config = config or SimConfig()
    cluster = SimCluster(seed, Shape(racks=config.racks))
    deployment = SimDeployment(cluster)
    loop = cluster.loop
    faults = faults_of(seed, config)
    recorded = io.StringIO() if config.trace is None else _TracedHistory(config.trace)
    cfg = RunConfig(
        seed=seed,
        seconds=config.seconds,
        faults=faults,
        rate=config.rate,
        streams=config.streams,
        namespace="sim",
    )

    def progress(line: str) -> None:
        if config.trace is not None:
            config.trace(f"{loop.time():9.3f} s  run: {line}")

    async def main() -> None:
        await cluster.start()
        deployment.start()
        await asyncio.sleep(REGISTER_S)
        harness = cluster.add_host("harness", cluster.topology.region_names[0])
        await loop.spawn(harness, failover_run(deployment, cfg, recorded, progress))

    failure = None
    root = logging.getLogger()
    quiet, level, handlers = root.manager.disable, root.level, root.handlers
    if config.trace is None:
        logging.disable(logging.CRITICAL)  # the real code's logs are the trace's, not a run's
    else:  # the trace's alone, in virtual time
        root.handlers = [_TraceLogs(config.trace)]
        root.setLevel(logging.INFO)
    try:
        with runtime.breaking(*config.broken):
            run(loop, asyncio.wait_for(main(), BOUND_S))
    except WorkerFailedError as err:
        failure = str(err)
    except TimeoutError as err:  # the bound, or one the run's own code let out
        failure = (
            f"the run did not end within {BOUND_S:g} s of virtual time"
            if loop.time() >= BOUND_S
            else f"a timeout escaped the run at {loop.time():.3f} s: {_where(err)}"
        )
    except SimulationError as err:  # stuck, or spinning: a hang, in virtual time
        failure = f"{type(err).__name__}: {err}"
    finally:
        logging.disable(quiet)
        root.handlers, root.level = handlers, level
    lines = recorded.getvalue().splitlines()
    history = read_history(lines)
    return SimResult(
        seed,
        faults,
        history,
        check(history),
        lines,
        failure,
        round(loop.time(), 3),
        {
            "zookeeper_operations": cluster.ensemble.operations,
            "bytes_delivered": cluster.network.bytes_delivered,
        },
    )
