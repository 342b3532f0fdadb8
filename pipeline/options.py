"""The options of the `globelog` Spark data source, checked on the driver before any task
starts (docs/spark.md lists them). Every problem is named with the option, the value given
and what was expected; all of them at once."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from core.dlsn import DLSN
from core.errors import ConfigError, GlobelogError, InvalidDlsnError
from core.parsing import bounded_int
from core.topology import Topology
from core.topology_loader import load_topology
from reader.positions import By, Position

STREAM_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,254}")
ENTRIES_PER_PARTITION = 2048
ENTRIES_PER_PARTITION_MAX = 1_000_000
MIN_PARTITIONS_MAX = 100_000
TRIGGER_MAX = 1 << 62

POSITION_KINDS = {"dlsn": By.DLSN, "txid": By.TXID, "seq": By.SEQ, "time": By.TIME}
READ_OPTIONS = frozenset(
    {"stream", "streams", "namespace", "topology", "region", "entriesperpartition", "minpartitions"}
    | {f"{edge}{kind}" for edge in ("starting", "ending") for kind in POSITION_KINDS}
)
STREAMING_OPTIONS = frozenset({"maxrecordspertrigger", "maxbytespertrigger"})
SPARK_OPTIONS = frozenset({"path", "checkpointlocation", "queryname"})  # set by Spark itself
SINK_OPTIONS = frozenset({"stream", "namespace", "topology", "region", "proxies"})
PROXY_URL = re.compile(r"https?://[A-Za-z0-9.\-\[\]:]+(:\d{1,5})?/?")


@dataclass(frozen=True, slots=True)
class SourceOptions:
    """What to read: streams of one namespace, from `start` up to `end` (exclusive)."""

    topology_path: Path
    region: str
    namespace: str
    streams: tuple[str, ...]
    start: Position
    end: Position | None  # None: up to the last record acknowledged when planning
    entries_per_partition: int
    max_records_per_trigger: int | None = None
    max_bytes_per_trigger: int | None = None
    # a batch read's partition count is a multiple of this (when it has that many entries);
    # None: the planning machine's cores
    min_partitions: int | None = None

    def topology(self) -> Topology:
        return load_topology(self.topology_path)


def parse_source_options(options: Mapping[str, str], *, streaming: bool = False) -> SourceOptions:
    """The options of a read (`streaming`: of a readStream); ConfigError naming every problem."""
    given = {str(k).lower(): str(v) for k, v in options.items()}
    problems: list[str] = []
    known = READ_OPTIONS | SPARK_OPTIONS | (STREAMING_OPTIONS if streaming else frozenset())
    for key in sorted(set(given) - known):
        problems.append(f"unknown option {key!r}; expected one of {sorted(known - SPARK_OPTIONS)}")
    streams = _streams(given, problems)
    topology_path = Path(
        given.get("topology") or os.environ.get("GLOBELOG_TOPOLOGY", "topology.yaml")
    )
    topology: Topology | None = None
    try:
        topology = load_topology(topology_path)
    except GlobelogError as err:
        problems.append(f"topology {str(topology_path)!r} cannot be used: {err}")
    region = given.get("region")
    if topology is not None:
        if region is None:
            region = topology.region_names[0]
        elif region not in topology.region_names:
            problems.append(f"region {region!r}; expected one of {list(topology.region_names)}")
    start = _position(given, "starting", problems) or Position.earliest()
    end = _position(given, "ending", problems)
    if streaming and end is not None:
        problems.append("ending* options are for batch reads; a stream read has no end")
    entries = _int(
        given, "entriesperpartition", ENTRIES_PER_PARTITION, 1, ENTRIES_PER_PARTITION_MAX, problems
    )
    min_partitions = None
    if "minpartitions" in given:
        min_partitions = _int(given, "minpartitions", 0, 1, MIN_PARTITIONS_MAX, problems)
    max_records = max_bytes = None
    if streaming:
        if "maxrecordspertrigger" in given:
            max_records = _int(given, "maxrecordspertrigger", 0, 1, TRIGGER_MAX, problems)
        if "maxbytespertrigger" in given:
            max_bytes = _int(given, "maxbytespertrigger", 0, 1, TRIGGER_MAX, problems)
    if problems:
        raise ConfigError("globelog data source: " + "; ".join(problems))
    assert region is not None
    return SourceOptions(
        topology_path,
        region,
        given.get("namespace", "default"),
        streams,
        start,
        end,
        entries,
        max_records,
        max_bytes,
        min_partitions,
    )


def _streams(given: dict[str, str], problems: list[str]) -> tuple[str, ...]:
    if "stream" in given and "streams" in given:
        problems.append("both stream and streams given; expected one of them")
    text = given.get("stream", given.get("streams"))
    if text is None:
        problems.append("no stream given; expected option stream=NAME or streams=A,B,...")
        return ()
    names = tuple(name.strip() for name in text.split(","))
    for name in names:
        if not STREAM_NAME.fullmatch(name):
            problems.append(
                f"stream name {name!r}; expected letters, digits, '_', '.', '-' (1..255, "
                "starting with a letter or digit)"
            )
    if len(set(names)) != len(names):
        problems.append(f"streams {text!r} names a stream twice")
    return names


def _position(given: dict[str, str], edge: str, problems: list[str]) -> Position | None:
    chosen = [(kind, by) for kind, by in POSITION_KINDS.items() if f"{edge}{kind}" in given]
    if not chosen:
        return None
    if len(chosen) > 1:
        names = [f"{edge}{kind}" for kind, _ in chosen]
        problems.append(f"{' and '.join(names)} given; expected at most one {edge} position")
        return None
    kind, by = chosen[0]
    key = f"{edge}{kind}"
    text = given[key]
    try:
        if by is By.DLSN:
            return Position(by, DLSN.parse(text))
        if by is By.TIME:
            return Position(by, _time_ms(text))
        value = int(text)
        if value < 0:
            raise ValueError
        return Position(by, value)
    except InvalidDlsnError as err:
        problems.append(f"{key}: {err}")
    except ValueError:
        expected = (
            "milliseconds since the epoch or an ISO-8601 time with its zone (2026-11-24T20:00:00Z)"
            if by is By.TIME
            else "an integer >= 0"
        )
        problems.append(f"{key} is {text!r}; expected {expected}")
    return None


def _time_ms(text: str) -> int:
    if text.strip().isdigit():
        return int(text)
    moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    if moment.tzinfo is None:
        raise ValueError(f"{text!r} has no time zone")
    return int(moment.timestamp() * 1000)


def _int(
    given: dict[str, str], key: str, default: int, low: int, high: int, problems: list[str]
) -> int:
    text = given.get(key)
    if text is None:
        return default
    value = bounded_int(text, low, high)
    if value is None:
        problems.append(f"{key} is {text!r}; expected an integer {low}..{high}")
        return default
    return value


@dataclass(frozen=True, slots=True)
class SinkOptions:
    """Where rows go: one stream of one namespace, through these write proxies (none given:
    the region's live proxies, from ZooKeeper)."""

    topology_path: Path
    region: str
    namespace: str
    stream: str
    proxies: tuple[str, ...]


def parse_sink_options(options: Mapping[str, str]) -> SinkOptions:
    """The options of a write; ConfigError naming every problem."""
    given = {str(k).lower(): str(v) for k, v in options.items()}
    problems: list[str] = []
    for key in sorted(set(given) - SINK_OPTIONS - SPARK_OPTIONS):
        problems.append(f"unknown option {key!r}; expected one of {sorted(SINK_OPTIONS)}")
    stream = given.get("stream")
    if stream is None:
        problems.append("no stream given; expected option stream=NAME")
    elif not STREAM_NAME.fullmatch(stream):
        problems.append(f"stream name {stream!r}; expected letters, digits, '_', '.', '-'")
    topology_path = Path(
        given.get("topology") or os.environ.get("GLOBELOG_TOPOLOGY", "topology.yaml")
    )
    region = given.get("region")
    try:
        topology = load_topology(topology_path)
        region = region or topology.region_names[0]
        if region not in topology.region_names:
            problems.append(f"region {region!r}; expected one of {list(topology.region_names)}")
    except GlobelogError as err:
        problems.append(f"topology {str(topology_path)!r} cannot be used: {err}")
    proxies = tuple(p.strip().rstrip("/") for p in given.get("proxies", "").split(",") if p.strip())
    for url in proxies:
        if not PROXY_URL.fullmatch(url):
            problems.append(f"proxy {url!r}; expected https://HOST:PORT (or http:// with TLS off)")
    if problems:
        raise ConfigError("globelog sink: " + "; ".join(problems))
    assert stream is not None and region is not None
    return SinkOptions(topology_path, region, given.get("namespace", "default"), stream, proxies)
