"""Where a `globelog` command's log records go: by default only globelog's own warnings, on
stderr; with -v every library's too (kazoo's reconnection chatter, aiohttp, py4j), with -vv
at debug level. `globelog serve` replaces this with the services' structured logs."""

from __future__ import annotations

import logging

# globelog's own top-level packages; a record of any other logger is a library's.
OWN_PACKAGES = frozenset(
    {
        "benchmarks",
        "cli",
        "core",
        "demo",
        "figures",
        "global_meta",
        "ledger",
        "localcluster",
        "pipeline",
        "placement",
        "reader",
        "region",
        "verify",
        "writer",
    }
)


def is_own(record: logging.LogRecord) -> bool:
    return record.name.partition(".")[0] in OWN_PACKAGES


def configure(verbosity: int) -> None:
    """0: globelog's warnings and errors only; 1: every logger's info; 2+: every debug."""
    handler = logging.StreamHandler()
    root = logging.getLogger()
    if verbosity <= 0:
        handler.setFormatter(logging.Formatter("globelog: %(levelname)s %(name)s: %(message)s"))
        handler.addFilter(is_own)
        root.setLevel(logging.WARNING)
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
        root.setLevel(logging.INFO if verbosity == 1 else logging.DEBUG)
    root.handlers[:] = [handler]
