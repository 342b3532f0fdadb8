"""The `globelog` command run as a user runs it: a subprocess of this interpreter, bounded."""

from __future__ import annotations

import subprocess
import sys


def run_globelog(*args: str, timeout_s: float) -> subprocess.CompletedProcess[str]:
    """`globelog ARGS...` to its end (or TimeoutExpired after `timeout_s`), output captured."""
    return subprocess.run(
        [sys.executable, "-m", "cli.main", *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
