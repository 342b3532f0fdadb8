from __future__ import annotations

from pathlib import Path

import pytest

from figures.plots import latency_over_time

pytestmark = pytest.mark.unit


def test_a_latency_plot_is_a_png_file(tmp_path: Path) -> None:
    path = latency_over_time(
        tmp_path / "sub" / "plot.png",
        "title",
        {"a": ([0.0, 0.5, 1.0], [1.0, 20.0, 3.0]), "b": ([0.1], [7.0])},
    )
    data = path.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 5000
