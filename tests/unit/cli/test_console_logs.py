"""The `globelog` command's logs: libraries' only with -v; the advice when no cluster answers."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from cli import console_logs, reach


@pytest.fixture
def root_logger() -> Iterator[logging.Logger]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        yield root
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


def record(name: str, level: int = logging.WARNING) -> logging.LogRecord:
    return logging.LogRecord(name, level, __file__, 1, "Connection dropped", None, None)


def test_by_default_only_globelogs_own_warnings_pass(root_logger: logging.Logger) -> None:
    console_logs.configure(0)
    (handler,) = root_logger.handlers
    assert root_logger.level == logging.WARNING
    assert not handler.filter(record("kazoo.client"))
    assert not handler.filter(record("aiohttp.access"))
    assert handler.filter(record("global_meta.store"))
    assert handler.filter(record("ledger.drivers.client"))


@pytest.mark.parametrize(("verbosity", "level"), [(1, logging.INFO), (2, logging.DEBUG)])
def test_verbose_passes_every_library(
    root_logger: logging.Logger, verbosity: int, level: int
) -> None:
    console_logs.configure(verbosity)
    (handler,) = root_logger.handlers
    assert root_logger.level == level
    assert handler.filter(record("kazoo.client"))


def test_advice_names_the_topology_and_the_commands() -> None:
    default = Path("/repo/topology.yaml")
    text = reach.advice(default, default)
    assert "is the cluster of /repo/topology.yaml running?" in text
    assert "globelog cluster up" in text and "globelog status " in text
    assert "--topology" not in text.splitlines()[1]

    other = Path("/tmp/t/topology.yaml")
    named = reach.advice(other, default)
    assert f"globelog cluster --topology {other} up" in named
    assert f"globelog status --topology {other}" in named
