"""The one globelog exception hierarchy: every error has a stable code and a retriable flag."""

from __future__ import annotations


class GlobelogError(Exception):
    """Root of every error globelog raises on purpose.

    Retry and redirect logic reads `code` and `retriable`, never the message text.
    """

    code = "internal"
    retriable = False


class ConfigError(GlobelogError):
    """Configuration (topology.yaml, flags) is invalid; nothing was started or changed."""

    code = "config_invalid"


class TopologyError(ConfigError):
    """topology.yaml has one or more problems; `problems` lists each with its YAML path."""

    code = "topology_invalid"

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = tuple(problems)
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"{source}: {len(problems)} problem(s):\n{lines}")


class QuorumError(ConfigError):
    """Replication settings that cannot keep the durability invariant."""

    code = "quorum_invalid"


class MetadataError(GlobelogError):
    """A metadata (ZooKeeper) operation failed for an operating reason."""

    code = "metadata_error"


class MetadataUnavailableError(MetadataError):
    """The metadata store cannot be reached right now (connection loss, timeout)."""

    code = "metadata_unavailable"
    retriable = True


class SessionExpiredError(MetadataError):
    """The metadata session expired: ephemeral nodes and watches of it are gone."""

    code = "metadata_session_expired"


class NodeExistsError(MetadataError):
    code = "metadata_node_exists"


class NoNodeError(MetadataError):
    code = "metadata_no_node"


class BadVersionError(MetadataError):
    """A versioned compare-and-set lost a race: someone else changed the node first."""

    code = "metadata_bad_version"


class NotEmptyError(MetadataError):
    code = "metadata_not_empty"


class ClusterError(GlobelogError):
    """The local cluster launcher could not start, find or control a process."""

    code = "cluster_error"
