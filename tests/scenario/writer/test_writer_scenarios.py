"""Golden scripts (testdata/*.txt) driving LogWriterState, the stream writer's pure machine:
transmit policies, control records, rolling, txid rules, end of stream, failure and fencing.

GLOBELOG_REWRITE=1 rewrites the scripts with the actual output (review the diff first).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.scenario.ledger.script import run_blocks
from tests.scenario.writer.runner import Runner

pytestmark = pytest.mark.scenario

TESTDATA = Path(__file__).parent / "testdata"
SCRIPTS = sorted(TESTDATA.glob("*.txt"))


def test_the_scenarios_are_there() -> None:
    assert len(SCRIPTS) >= 10, [p.name for p in SCRIPTS]


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.stem)
def test_golden_script(path: Path) -> None:
    rendered, mismatches = run_blocks(path.read_text(), path.name, Runner())
    if os.environ.get("GLOBELOG_REWRITE"):
        path.write_text(rendered)
        return
    assert not mismatches, "\n".join(mismatches)
