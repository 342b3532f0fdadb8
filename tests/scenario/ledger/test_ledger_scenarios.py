"""Golden scripts (testdata/*.txt) driving the ledger client's pure state machines.

Each script makes one machine and feeds it one command per block; the block lists the
actions expected, and every step runs the machine's `validate()`. GLOBELOG_REWRITE=1
rewrites the scripts with the actual output (review the diff before committing it).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.scenario.ledger.runner import Runner
from tests.scenario.ledger.script import run_blocks

pytestmark = pytest.mark.scenario

TESTDATA = Path(__file__).parent / "testdata"
SCRIPTS = sorted(TESTDATA.glob("*.txt"))


def run_script(text: str, source: str) -> tuple[str, list[str]]:
    return run_blocks(text, source, Runner())


def test_the_scenarios_are_there() -> None:
    assert len(SCRIPTS) >= 15, [p.name for p in SCRIPTS]


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.stem)
def test_golden_script(path: Path) -> None:
    rendered, mismatches = run_script(path.read_text(), path.name)
    if os.environ.get("GLOBELOG_REWRITE"):
        path.write_text(rendered)
        return
    assert not mismatches, "\n".join(mismatches)


def test_a_wrong_expectation_is_reported() -> None:
    script = (
        "new-add ensemble=b0,b1,b2 write=3 ack=2\n----\n(no actions)\n\n"
        "submit len=5\n----\nentry 0\nsend-add e=0 to=b0@0 lac=-1 length=5\n"
    )
    _, mismatches = run_script(script, "inline")
    assert len(mismatches) == 1 and "inline:5: submit len=5" in mismatches[0], mismatches


def test_an_unknown_argument_is_an_error() -> None:
    with pytest.raises(AssertionError, match="raised"):
        run_script("new-add ensemble=b0 write=1 ack=1 colour=red\n----\n(no actions)\n", "x")
