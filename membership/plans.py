"""The topology file with a region added or removed: checked as `topology.yaml` is, written
so that every host can be given the same file.

A region file (`globelog region add --from FILE`) holds one region as topology.yaml lists it,
its ZooKeeper node(s), and optionally the replication that new ledgers take once it joined:

    region: {name: ap-south, racks: [...], write_proxies: [...], read_proxies: [...]}
    zookeeper: [{name: zk-ap-south, region: ap-south, host: ..., client_port: 2181, ...}]
    replication: {ensemble_size: 4, write_quorum: 4, ack_quorum: 3, min_regions_for_durability: 2}

The rewritten file names every ZooKeeper node's server id (`id:`): ids are positional when
absent, and a node that leaves must not renumber the ones after it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from core.errors import ConfigError, TopologyError
from core.topology import Topology
from core.topology_loader import FILE_BYTES_MAX, parse_topology
from placement.errors import QuorumSettingsError
from placement.quorum import check_quorum

REGION_FILE_KEYS = {"region", "zookeeper", "replication"}
HEADER = "# globelog topology; {what} by `globelog region {verb}` on {when}\n"


@dataclass(frozen=True, slots=True)
class Plan:
    """A topology before and after one region change, and the new file's text."""

    region: str
    before: Topology
    after: Topology
    text: str


def _document(text: str, source: str) -> dict[str, Any]:
    if len(text.encode()) > FILE_BYTES_MAX:
        raise ConfigError(f"{source}: over {FILE_BYTES_MAX} bytes; a topology is a few KiB")
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ConfigError(f"{source}: not YAML: {err}") from err
    if not isinstance(document, dict):
        raise ConfigError(f"{source}: expected a mapping at the top, got {type(document).__name__}")
    return document


def _pin_server_ids(document: dict[str, Any]) -> None:
    for i, node in enumerate(document.get("zookeeper") or []):
        if isinstance(node, dict):
            node.setdefault("id", i + 1)


def _checked(document: dict[str, Any], source: str) -> tuple[Topology, str]:
    text = yaml.safe_dump(document, sort_keys=False, default_flow_style=None, width=100)
    topology = parse_topology(text, source)
    try:
        check_quorum(topology.replication, len(topology.regions))
    except QuorumSettingsError as err:
        raise TopologyError(source, [f"replication: {p}" for p in err.problems]) from err
    return topology, text


def region_name(region_text: str, source: str) -> str:
    """The name of the region a region file adds."""
    region = _document(region_text, source).get("region")
    if not isinstance(region, dict) or not isinstance(region.get("name"), str):
        raise ConfigError(f"{source}: region: expected a mapping with a name, got {region!r}")
    return str(region["name"])


def plan_add(topology_text: str, region_text: str, source: str) -> Plan:
    """The topology with the region of `region_text` added (ConfigError or TopologyError
    saying what is wrong, with the path of each problem)."""
    before = parse_topology(topology_text, "topology")
    document = _document(topology_text, "topology")
    region_doc = _document(region_text, source)
    unknown = sorted(set(region_doc) - REGION_FILE_KEYS)
    if unknown:
        raise ConfigError(
            f"{source}: unknown key(s) {unknown}; a region file has {sorted(REGION_FILE_KEYS)}"
        )
    name = region_name(region_text, source)
    region = region_doc["region"]
    if name in before.region_names:
        raise ConfigError(
            f"{source}: region {name!r} is already in the topology (regions: "
            f"{list(before.region_names)}); `globelog region add {name}` joins a region the "
            "file already lists"
        )
    nodes = region_doc.get("zookeeper") or []
    if not isinstance(nodes, list) or not nodes:
        raise ConfigError(f"{source}: zookeeper: expected the region's node(s), got {nodes!r}")
    _pin_server_ids(document)
    next_id = max((n.server_id for n in before.zookeeper), default=0) + 1
    for node in nodes:
        if isinstance(node, dict):
            if node.get("region", name) != name:
                raise ConfigError(
                    f"{source}: zookeeper node {node.get('name')!r} is in region "
                    f"{node.get('region')!r}; a region file adds nodes of {name!r} only"
                )
            node.setdefault("region", name)
            if "id" not in node:
                node["id"] = next_id
                next_id += 1
    document["regions"] = [*document.get("regions", []), region]
    document["zookeeper"] = [*document.get("zookeeper", []), *nodes]
    if "replication" in region_doc:
        document["replication"] = region_doc["replication"]
    after, text = _checked(document, f"topology + {source}")
    return Plan(name, before, after, text)


def plan_join(topology_text: str, region: str) -> Plan:
    """A region the topology file already lists (an operator added it by hand) that the
    running system does not have yet."""
    after = parse_topology(topology_text, "topology")
    if region not in after.region_names:
        raise ConfigError(
            f"region {region!r} is not in the topology file (regions: "
            f"{list(after.region_names)}); give its region file with --from"
        )
    document = _document(topology_text, "topology")
    _pin_server_ids(document)
    document["regions"] = [r for r in document["regions"] if r.get("name") != region]
    document["zookeeper"] = [z for z in document["zookeeper"] if z.get("region") != region]
    # its replication may need the region: only the file with it is checked against the rule
    text = yaml.safe_dump(document, sort_keys=False, default_flow_style=None, width=100)
    before = parse_topology(text, "topology without the region")
    return Plan(region, before, after, topology_text)


def plan_remove(topology_text: str, region: str) -> Plan:
    """The topology without `region`, its ZooKeeper node(s), and its WAN links."""
    before = parse_topology(topology_text, "topology")
    if region not in before.region_names:
        raise ConfigError(
            f"region {region!r} is not in the topology (regions: {list(before.region_names)})"
        )
    document = _document(topology_text, "topology")
    _pin_server_ids(document)
    document["regions"] = [r for r in document["regions"] if r.get("name") != region]
    document["zookeeper"] = [z for z in document["zookeeper"] if z.get("region") != region]
    wan = document.get("wan")
    if isinstance(wan, dict) and isinstance(wan.get("profiles"), dict):
        for profile, links in wan["profiles"].items():
            wan["profiles"][profile] = [
                link for link in links if region not in (link.get("between") or [])
            ]
    after, text = _checked(document, f"topology without {region}")
    return Plan(region, before, after, text)


def write_topology(path: Path, text: str, header: str, change: str) -> Path:
    """Replaces the topology file at `path` (atomically, by rename, with its mode) with
    `text`; the file it replaces is kept beside it as `<name>.before-<change>` (for example
    `topology.yaml.before-remove-eu-west`). Returns the kept copy's path. ConfigError when
    the directory cannot be written."""
    kept = path.with_name(f"{path.name}.before-{change}")
    new = path.with_name(path.name + ".new")
    try:
        mode = path.stat().st_mode & 0o777 if path.exists() else 0o644
        with new.open("w") as out:
            out.write(header + text)
            out.flush()
            os.fsync(out.fileno())
        new.chmod(mode)
        if path.exists() and not kept.exists():  # a resumed run keeps the first original
            kept.write_bytes(path.read_bytes())
        os.replace(new, path)
    except OSError as err:
        raise ConfigError(f"cannot rewrite the topology file {path}: {err.strerror}") from err
    return kept
