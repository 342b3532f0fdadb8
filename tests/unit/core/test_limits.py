"""topology.yaml's `limits:` section, and docs/http-api.md's Limits tables against the code."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from core.settings.limits import MIB, ProxyLimits, Quota, limit_names, quota_names, shown
from core.settings.limits_loader import parse_limits

pytestmark = pytest.mark.unit
DOC = Path(__file__).resolve().parents[3] / "docs" / "http-api.md"


class Problems:
    def __init__(self) -> None:
        self.items: list[str] = []

    def add(self, path: str, message: str) -> None:
        self.items.append(f"{path}: {message}")


def parsed(node: Any) -> tuple[ProxyLimits | None, list[str]]:
    problems = Problems()
    return parse_limits(node, problems), problems.items


def test_no_section_is_the_defaults() -> None:
    assert parsed(None) == (ProxyLimits(), [])


def test_settings_and_quotas_override_the_defaults_per_namespace() -> None:
    limits, problems = parsed(
        {
            "connections_max": 20,
            "idle_timeout_s": 2.5,
            "quota": {"append_bytes_per_s": 1000, "read_requests_per_s": None},
            "namespace_quotas": {"bulk": {"append_requests_per_s": 7}},
        }
    )
    assert problems == [] and limits is not None
    assert (limits.connections_max, limits.idle_timeout_s) == (20, 2.5)
    assert limits.quota == Quota(append_bytes_per_s=1000, read_requests_per_s=None)
    bulk = limits.quota_for("bulk")
    assert bulk.append_requests_per_s == 7 and bulk.append_bytes_per_s == 1000
    assert bulk.read_requests_per_s is None  # inherited from `quota`
    assert limits.quota_for("other") == limits.quota


@pytest.mark.parametrize(
    ("node", "expected"),
    [
        ({"connections_max": 0}, "limits.connections_max: expected an integer > 0, got 0"),
        ({"connections_max": 2.5}, "limits.connections_max: expected an integer > 0, got 2.5"),
        ({"idle_timeout_s": "1"}, "limits.idle_timeout_s: expected a number of seconds > 0"),
        ({"conections_max": 3}, "limits.conections_max: unknown key"),
        ({"quota": {"append_bytes_per_s": -1}}, "limits.quota.append_bytes_per_s: expected"),
        ({"quota": {"writes_per_s": 1}}, "limits.quota.writes_per_s: unknown key"),
        ({"quota": {"burst_s": None}}, "limits.quota.burst_s: expected seconds from 0.01 to 60"),
        ({"quota": {"burst_s": 0}}, "limits.quota.burst_s: expected seconds from 0.01 to 60"),
        ({"namespace_quotas": ["a"]}, "limits.namespace_quotas: expected a mapping"),
        ({"namespace_quotas": {"a": 3}}, "limits.namespace_quotas.a: expected a mapping"),
        ([1], "limits: expected a mapping, got list"),
    ],
)
def test_a_bad_setting_is_named_with_what_was_expected(node: Any, expected: str) -> None:
    limits, problems = parsed(node)
    assert limits is None and len(problems) == 1 and problems[0].startswith(expected), problems


def doc_rows(header: str) -> dict[str, str]:
    """The first two cells of each row of the table under `header` (a line of the table's head)."""
    text = DOC.read_text()
    table = text[text.index(header) :].split("\n\n", 1)[0]
    rows: dict[str, str] = {}
    for line in table.splitlines()[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        match = re.fullmatch(r"`(\w+)`", cells[0])
        assert match, line
        rows[match.group(1)] = cells[1]
    return rows


def test_the_docs_limits_table_is_every_limit_with_its_default() -> None:
    rows = doc_rows("| setting | default | bounds | past it |")
    defaults = ProxyLimits()
    assert list(rows) == limit_names()
    assert {n: rows[n] for n in rows} == {n: shown(n, getattr(defaults, n)) for n in rows}


def test_the_docs_quota_table_is_every_rate_with_its_default() -> None:
    rows = doc_rows("| quota (`quota:` and `namespace_quotas:`) | default |")
    quota = Quota()
    assert rows == {n: shown(n, getattr(quota, n)) for n in quota_names()}
    assert shown("append_bytes_per_s", 64 * MIB) == "64 MiB"
