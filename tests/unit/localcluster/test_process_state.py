"""A recorded process's state: a child between fork and exec is starting, not dead."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from localcluster.processes import ProcessRecord, RunState, run_state

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
