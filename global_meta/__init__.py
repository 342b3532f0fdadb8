"""globelog's metadata layer: the one asyncio adapter over ZooKeeper (kazoo).

No kazoo type escapes this package: callers await coroutines, iterate async watches, and
receive `core.errors.MetadataError` subclasses. The loops that follow the metadata (watch
followers, a read proxy's read-aheads) run under `global_meta.followers.Follower`, which
restarts them with backoff and shows their state, so none stops for good on one error.
"""

from global_meta.session import MetaSession
from global_meta.store import (
    ANY_VERSION,
    EnsembleConfig,
    MetaStore,
    NodeStat,
    SessionEvent,
    SessionState,
)

__all__ = [
    "ANY_VERSION",
    "EnsembleConfig",
    "MetaSession",
    "MetaStore",
    "NodeStat",
    "SessionEvent",
    "SessionState",
]
