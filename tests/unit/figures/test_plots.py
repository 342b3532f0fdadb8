from __future__ import annotations

from pathlib import Path

import pytest

from figures.plots import latency_over_time, story_timeline

pytestmark = pytest.mark.unit


def test_a_latency_plot_is_a_png_file(tmp_path: Path) -> None:
    path = latency_over_time(
        tmp_path / "sub" / "plot.png",
        "title",
        {"a": ([0.0, 0.5, 1.0], [1.0, 20.0, 3.0]), "b": ([0.1], [7.0])},
    )
    data = path.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 5000


def test_the_demo_timeline_is_a_png_file(tmp_path: Path) -> None:
    acked = [i * 0.1 for i in range(300)]
    delivered = {
        "us-east": [(t + 0.05, 50.0) for t in acked],
        "us-west": [(t + 0.1, 100.0) for t in acked if not 10 < t < 20]
        + [(21.0, (21 - t) * 1000) for t in acked if 10 < t < 20],
    }
    faults = [(4.0, 5.5, "owner killed"), (10.0, 20.0, "region us-west down")]
    path = story_timeline(tmp_path / "demo.png", "title", acked, delivered, faults)
    data = path.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 20000


def test_the_demo_timeline_draws_nothing_yet(tmp_path: Path) -> None:
    path = story_timeline(tmp_path / "empty.png", "title", [], {}, [])
    assert path.read_bytes().startswith(b"\x89PNG")
