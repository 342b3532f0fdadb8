"""What a rebuilder does when, and how fast: every knob with its default and why, and
topology.yaml's optional `rebuild:` section over them:

    rebuild:
      lost_bookie_delay_s: 60
      check_interval_s: 3600
      ledgers_at_once: 4
      rate_bytes_s: 67108864
      rate_min_bytes_s: 4194304
      yield_delay_s: 0.005
      shared_pace: true
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from core.errors import ConfigError

REBUILDERS_ZNODE = "/globelog/rebuilders"  # each rebuilder's ephemeral status, JSON
DECOMMISSION_ZNODE = "/globelog/decommission"  # bookies an operator is taking out of service
CHECK_NOW_ZNODE = "/globelog/rebuild-check"  # present: the auditor runs a full check now


@dataclass(frozen=True, slots=True)
class RebuildSettings:
    # A bookie gone from the registry this long is lost and its ledgers are marked. A restart
    # or a short partition comes back well within it; a dead disk does not. (BookKeeper marks
    # at once by default; a delay spares the WAN a copy of every ledger on each restart.)
    lost_bookie_delay_s: float = 60.0
    # How often the auditor walks every ledger for copies on unknown bookies and ensembles that
    # break the region rule (BookKeeper: a week; ours also catches what a missed watch missed).
    check_interval_s: float = 3600.0
    # Ledgers one rebuilder copies at once, and bytes per second it copies at in all: at most
    # `rate_bytes_s`; with `yield_delay_s` > 0 the rate yields to the foreground (it drops
    # while the rebuild's own adds queue more than that at a bookie, rebuild.pacing) but never
    # below `rate_min_bytes_s`, since a copy short is a durability debt; `yield_delay_s` 0 is a
    # fixed `rate_bytes_s`.
    ledgers_at_once: int = 4
    rate_bytes_s: int = 64 * 1024 * 1024
    rate_min_bytes_s: int = 4 * 1024 * 1024
    yield_delay_s: float = 0.005
    # With `shared_pace`, the rates above are the cluster's rebuilders' together: each takes an
    # equal share among those copying at the time (rebuild.pacing), so a loss rebuilt by every
    # region's rebuilder costs the foreground what one would. Off: each rebuilder's own.
    shared_pace: bool = True
    # How long an idle worker waits before it looks for marked ledgers again.
    poll_interval_s: float = 2.0
    # A ledger that failed (no replacement, a copy unreadable) or whose open last ensemble is
    # its writer's is left this long before it is claimed again.
    retry_after_s: float = 10.0
    # How often a rebuilder publishes its status.
    report_interval_s: float = 2.0

    def __post_init__(self) -> None:
        problems = [
            f"{name} = {value!r} (expected > 0)"
            for name, value in (
                ("check_interval_s", self.check_interval_s),
                ("ledgers_at_once", self.ledgers_at_once),
                ("rate_bytes_s", self.rate_bytes_s),
                ("rate_min_bytes_s", self.rate_min_bytes_s),
                ("poll_interval_s", self.poll_interval_s),
                ("retry_after_s", self.retry_after_s),
                ("report_interval_s", self.report_interval_s),
            )
            if not value > 0
        ]
        for name, value in (
            ("lost_bookie_delay_s", self.lost_bookie_delay_s),
            ("yield_delay_s", self.yield_delay_s),
        ):
            if value < 0:
                problems.append(f"{name} = {value!r} (expected >= 0)")
        if problems:
            raise ConfigError("rebuild settings: " + "; ".join(problems))


def flag_type(key: str) -> Callable[[str], Any]:
    """How the command-line flag of setting `key` reads its text (`globelog serve rebuilder`):
    `on`/`off` for a switch, else as the setting's type."""
    kind = type(getattr(RebuildSettings(), key))
    return _on_off if kind is bool else kind


def _on_off(text: str) -> bool:
    if text not in ("on", "off"):
        raise argparse.ArgumentTypeError(f"expected on or off, got {text!r}")
    return text == "on"


class Problems(Protocol):
    def add(self, path: str, message: str) -> None: ...


def parse_rebuild(node: Any, p: Problems) -> RebuildSettings | None:
    """The settings in `node` (None or a mapping) over the defaults; problems to `p`."""
    defaults = RebuildSettings()
    if node is None:
        return defaults
    if not isinstance(node, dict):
        p.add("rebuild", f"expected a mapping, got {type(node).__name__}")
        return None
    names = [f.name for f in dataclasses.fields(RebuildSettings)]
    values: dict[str, Any] = {}
    ok = True
    for key, value in node.items():
        if key not in names:
            p.add(f"rebuild.{key}", f"unknown key; expected one of {names}")
            ok = False
            continue
        if isinstance(getattr(defaults, key), bool):
            if isinstance(value, bool):
                values[key] = value
            else:
                p.add(f"rebuild.{key}", f"expected true or false, got {value!r}")
                ok = False
            continue
        whole = isinstance(getattr(defaults, key), int)
        if type(value) in ((int,) if whole else (int, float)) and value >= 0:
            values[key] = value if whole else float(value)
        else:
            expected = "an integer" if whole else "a number of seconds"
            p.add(f"rebuild.{key}", f"expected {expected} >= 0, got {value!r}")
            ok = False
    if not ok:
        return None
    try:
        return dataclasses.replace(defaults, **values)
    except ConfigError as err:
        p.add("rebuild", str(err))
        return None
