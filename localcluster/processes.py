"""OS processes of the local cluster: start detached, identify by pid and command line, signal."""

from __future__ import annotations

import contextlib
import enum
import json
import os
import signal
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from core.errors import ClusterError
from localcluster.plan import ProcessSpec

STOP_GRACE_S = 10.0  # SIGTERM first; SIGKILL after this
STATE_FILE = "cluster.json"


class RunState(enum.Enum):
    RUNNING = "running"
    PAUSED = "paused"
    DEAD = "dead"


@dataclass(frozen=True, slots=True)
class ProcessRecord:
    """What `cluster up` remembers about a process it started."""

    name: str
    kind: str
    pid: int
    argv: list[str]
    log: str
    region: str | None
    ports: tuple[int, ...] = ()


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int, children: bool = False) -> float:
    """User + system CPU seconds of a live process so far (with `children`, also those of
    its children that ended and were waited for)."""
    return _stat_cpu_seconds(Path(f"/proc/{pid}/stat"), children)


def _stat_cpu_seconds(stat: Path, children: bool = False) -> float:
    """User + system CPU seconds from a process's or a thread's `stat` file."""
    fields = stat.read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])
    if children:
        ticks += int(fields[13]) + int(fields[14])
    return ticks / CLOCK_TICKS


def compiler_threads_cpu(pid: int) -> dict[int, float]:
    """CPU seconds so far of each of a JVM's JIT compiler threads, by thread id (HotSpot names
    them `C1 CompilerThre…` and `C2 CompilerThre…`, and starts and ends them as the work
    comes and goes); {} for a process that has none."""
    found = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            if (task / "comm").read_text().startswith(("C1 Compiler", "C2 Compiler")):
                found[int(task.name)] = _stat_cpu_seconds(task / "stat")
        except OSError:
            continue  # the thread ended meanwhile
    return found


def descendants(pid: int) -> list[int]:
    """Every live process below `pid` (children, their children, ...)."""
    parent_of: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue  # ended meanwhile
            parent_of[int(entry.name)] = int(fields[1])
    below: list[int] = []
    frontier = [pid]
    while frontier:
        parent = frontier.pop()
        children = [child for child, up in parent_of.items() if up == parent]
        below += children
        frontier += children
    return below


PF_KTHREAD = 0x00200000  # the kernel's flag for its own threads (stat field 9)


def _proc_stat(pid: int) -> tuple[str, int] | None:
    """The process's state letter and flags, or None when there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return fields[0], int(fields[6])


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def _reap(pid: int) -> None:
    """Collects the exit status when this process is the parent (tests start clusters inline)."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def run_state(record: ProcessRecord) -> RunState:
    """RUNNING, PAUSED or DEAD; a reused pid running something else counts as DEAD."""
    _reap(record.pid)
    stat = _proc_stat(record.pid)
    if stat is None:
        return RunState.DEAD
    return judge(*stat, _cmdline(record.pid), record.argv, _cmdline(os.getpid()))


def judge(
    state: str, flags: int, cmdline: list[str], argv: list[str], own_cmdline: list[str]
) -> RunState:
    """The run state of a live pid from what /proc shows of it, for a process started as
    `argv` by a process whose command line is `own_cmdline`."""
    if state in ("Z", "X") or flags & PF_KTHREAD:
        return RunState.DEAD
    # A child started a moment ago is starting, not dead (nor a reused pid): between fork and
    # exec it shows this process's command line, and in the middle of exec, once the kernel
    # has swapped in the new address space and before it has laid out the arguments, none.
    if cmdline not in (argv, own_cmdline, []):
        return RunState.DEAD
    return RunState.PAUSED if state in ("T", "t") else RunState.RUNNING


def start(spec: ProcessSpec) -> ProcessRecord:
    """Writes the spec's files and starts it in its own session, logging to its log file."""
    for path, content in spec.files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
    spec.log.parent.mkdir(parents=True, exist_ok=True)
    with spec.log.open("ab") as log:
        log.write(f"\n=== start {time.strftime('%Y-%m-%dT%H:%M:%S')} {spec.name}\n".encode())
        log.flush()
        try:
            process = subprocess.Popen(
                spec.argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        except OSError as err:
            raise ClusterError(f"start {spec.name}: {err.strerror}: {spec.argv[0]}") from err
    return ProcessRecord(
        spec.name, spec.kind, process.pid, list(spec.argv), str(spec.log), spec.region, spec.ports
    )


def signal_process(record: ProcessRecord, signum: int) -> bool:
    """Sends `signum` if the process is still ours; False when it is already gone."""
    if run_state(record) is RunState.DEAD:
        return False
    try:
        os.kill(record.pid, signum)
    except ProcessLookupError:
        return False
    return True


def stop(record: ProcessRecord, grace_s: float = STOP_GRACE_S) -> None:
    """Stops the process: SIGCONT (if paused), SIGTERM, then SIGKILL after `grace_s`."""
    if not signal_process(record, signal.SIGCONT):
        return
    signal_process(record, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if run_state(record) is RunState.DEAD:
            return
        time.sleep(0.05)
    signal_process(record, signal.SIGKILL)
    for _ in range(100):
        if run_state(record) is RunState.DEAD:
            return
        time.sleep(0.05)
    raise ClusterError(f"stop {record.name}: pid {record.pid} survived SIGKILL")


def load_state(data_dir: Path) -> dict[str, ProcessRecord]:
    path = data_dir / STATE_FILE
    if not path.is_file():
        return {}
    try:
        document = json.loads(path.read_text())
        return {
            name: ProcessRecord(**{**fields, "ports": tuple(fields.get("ports", ()))})
            for name, fields in document["processes"].items()
        }
    except (ValueError, KeyError, TypeError) as err:
        raise ClusterError(f"{path}: unreadable cluster state ({err!r}); remove it") from err


def save_state(data_dir: Path, records: dict[str, ProcessRecord], meta: dict[str, str]) -> None:
    data_dir.mkdir(parents=True, exist_ok=True)
    document = {"meta": meta, "processes": {n: asdict(r) for n, r in records.items()}}
    tmp = data_dir / f"{STATE_FILE}.tmp"
    tmp.write_text(json.dumps(document, indent=1, sort_keys=True))
    tmp.replace(data_dir / STATE_FILE)


def load_meta(data_dir: Path) -> dict[str, str]:
    path = data_dir / STATE_FILE
    if not path.is_file():
        return {}
    meta = json.loads(path.read_text()).get("meta", {})
    return {str(k): str(v) for k, v in meta.items()}
