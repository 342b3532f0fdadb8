"""A recorded process's state: a child between fork and exec, or in the middle of exec, is
starting, not dead."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from localcluster.processes import PF_KTHREAD, ProcessRecord, RunState, judge, run_state

pytestmark = pytest.mark.unit


def record(pid: int, argv: list[str]) -> ProcessRecord:
    return ProcessRecord("wp-x", "write-proxy", pid, argv, "/dev/null", "us-east", ())


def test_a_process_still_showing_our_command_line_is_starting_not_dead() -> None:
    # A fork not yet exec'd shows its parent's command line: this process stands for one.
    assert run_state(record(os.getpid(), ["python", "-m", "cli.main", "serve"])) is RunState.RUNNING


def test_a_live_pid_running_something_else_is_dead_and_a_matching_one_runs() -> None:
    argv = [sys.executable, "-c", "import time; time.sleep(30)"]
    child = subprocess.Popen(argv)
    try:
        cmdline = Path(f"/proc/{child.pid}/cmdline")
        for _ in range(500):  # until it has exec'd (at most 5 s)
            if cmdline.read_bytes().split(b"\0")[: len(argv)] == [a.encode() for a in argv]:
                break
            time.sleep(0.01)
        assert run_state(record(child.pid, argv)) is RunState.RUNNING
        assert run_state(record(child.pid, ["something", "else"])) is RunState.DEAD
    finally:
        child.kill()
        child.wait(timeout=10)
    assert run_state(record(child.pid, argv)) is RunState.DEAD


ARGV = ["python", "-m", "cli.main", "serve", "read-proxy"]
OURS = ["python", "-m", "pytest"]


@pytest.mark.parametrize(
    ("state", "flags", "cmdline", "expected"),
    [
        ("S", 0, ARGV, RunState.RUNNING),
        ("T", 0, ARGV, RunState.PAUSED),
        ("S", 0, OURS, RunState.RUNNING),  # forked, not yet exec'd
        # In the middle of exec the new address space has no arguments yet: /proc shows none
        # (a read proxy judged dead in that instant once failed a region's restart).
        ("R", 0, [], RunState.RUNNING),
        ("S", PF_KTHREAD, [], RunState.DEAD),  # a kernel thread that took the pid
        ("S", 0, ["java", "-jar", "x"], RunState.DEAD),
        ("Z", 0, [], RunState.DEAD),
    ],
)
def test_what_proc_shows_of_a_pid_decides_its_state(
    state: str, flags: int, cmdline: list[str], expected: RunState
) -> None:
    assert judge(state, flags, cmdline, ARGV, OURS) is expected
