"""The proxies time the cyclic garbage collector's collections (the event loop stops for each)
and warn of a long one."""

from __future__ import annotations

import gc
import logging

import pytest

from region.observability import telemetry


def test_every_collection_is_timed_with_its_generation_and_a_long_one_is_logged(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple[float, int]] = []
    monkeypatch.setattr(telemetry, "GC_PAUSE_WARN_S", 60.0)
    callback = telemetry.time_collections(lambda s, g: seen.append((s, g)))
    try:
        gc.collect(1)
        gc.collect(2)
        assert [g for _, g in seen][-2:] == [1, 2]
        assert all(seconds >= 0 for seconds, _ in seen)
        assert not caplog.records, "collections under the bound are not logged"
        monkeypatch.setattr(telemetry, "GC_PAUSE_WARN_S", 0.0)  # every one is long now
        with caplog.at_level(logging.WARNING, logger=telemetry.__name__):
            gc.collect(2)
        assert "generation-2 garbage collection stopped the loop" in caplog.text
    finally:
        gc.callbacks.remove(callback)
    count = len(seen)
    gc.collect()
    assert len(seen) == count, "removed, it records nothing more"
