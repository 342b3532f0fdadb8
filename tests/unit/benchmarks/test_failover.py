from __future__ import annotations

import pytest

from cli.main import main

pytestmark = pytest.mark.unit


def test_bad_flags_are_refused_before_any_cluster_starts(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["bench", "failover", "--kills", "0", "--profile", "nope"]) == 1
    err = capsys.readouterr().err
    assert "--kills 0: expected 1..200" in err and "--profile 'nope'" in err
