"""Parses topology.yaml's optional `limits:` section (core/settings/limits.py) over the defaults.

    limits:
      connections_max: 10000          # any scalar of ProxyLimits
      quota: {append_bytes_per_s: 67108864, read_requests_per_s: null}   # null: no limit
      namespace_quotas:               # per namespace, over `quota`
        bulk-import: {append_bytes_per_s: 268435456}

Problems go to the topology loader's collector, each with its YAML path.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from core.settings.limits import ProxyLimits, Quota, limit_names, quota_names
from core.settings.stream_settings_loader import Problems

QUOTA_RATE_MAX = 1e12
BURST_S_MIN, BURST_S_MAX = 0.01, 60.0  # a quota's burst_s


def _is_number(value: Any) -> bool:
    return type(value) in (int, float)


def _unknown(node: dict[str, Any], known: list[str], path: str, p: Problems) -> bool:
    extra = sorted(set(node) - set(known), key=str)
    for key in extra:
        p.add(f"{path}.{key}", f"unknown key; expected one of {known}")
    return not extra


def _quota(node: Any, base: Quota, path: str, p: Problems) -> Quota | None:
    if not isinstance(node, dict):
        p.add(path, f"expected a mapping of rates, got {node!r}")
        return None
    ok = _unknown(node, quota_names(), path, p)
    values: dict[str, Any] = {}  # rates (float or None) and burst_s (float)
    for key, value in node.items():
        if key not in quota_names():
            continue
        if key == "burst_s":
            if _is_number(value) and BURST_S_MIN <= value <= BURST_S_MAX:
                values[key] = float(value)
            else:
                ok = False
                p.add(
                    f"{path}.{key}",
                    f"expected seconds from {BURST_S_MIN:g} to {BURST_S_MAX:g}; got {value!r}",
                )
            continue
        if value is None or (_is_number(value) and 0 < value <= QUOTA_RATE_MAX):
            values[key] = None if value is None else float(value)
        else:
            ok = False
            p.add(f"{path}.{key}", f"expected a rate per second > 0, or null; got {value!r}")
    return dataclasses.replace(base, **values) if ok else None


def parse_limits(node: Any, p: Problems) -> ProxyLimits | None:
    """The limits in `node` (None or a mapping) over the built-in defaults."""
    defaults = ProxyLimits()
    if node is None:
        return defaults
    if not isinstance(node, dict):
        p.add("limits", f"expected a mapping, got {type(node).__name__}")
        return None
    scalars = limit_names()
    ok = _unknown(node, [*scalars, "quota", "namespace_quotas"], "limits", p)
    values: dict[str, Any] = {}
    for key in scalars:
        if key not in node:
            continue
        value, default = node[key], getattr(defaults, key)
        whole = isinstance(default, int)
        if _is_number(value) and value > 0 and (not whole or type(value) is int):
            values[key] = value if whole else float(value)
        else:
            ok = False
            expected = "an integer > 0" if whole else "a number of seconds > 0"
            p.add(f"limits.{key}", f"expected {expected}, got {value!r}")
    quota = defaults.quota
    if "quota" in node:
        parsed = _quota(node["quota"], quota, "limits.quota", p)
        ok = ok and parsed is not None
        quota = parsed or quota
    per_namespace: list[tuple[str, Quota]] = []
    namespaces = node.get("namespace_quotas", {})
    if not isinstance(namespaces, dict):
        ok = False
        p.add("limits.namespace_quotas", f"expected a mapping of namespaces, got {namespaces!r}")
        namespaces = {}
    for name, entry in namespaces.items():
        parsed = _quota(entry, quota, f"limits.namespace_quotas.{name}", p)
        ok = ok and parsed is not None
        if parsed is not None:
            per_namespace.append((str(name), parsed))
    if not ok:
        return None
    return dataclasses.replace(
        defaults, **values, quota=quota, namespace_quotas=tuple(per_namespace)
    )
