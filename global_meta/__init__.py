"""globelog's metadata layer: the one asyncio adapter over ZooKeeper (kazoo).

No kazoo type escapes this package: callers await coroutines, iterate async watches, and
receive `core.errors.MetadataError` subclasses.
"""

from global_meta.store import ANY_VERSION, MetaStore, NodeStat, SessionEvent, SessionState

__all__ = ["ANY_VERSION", "MetaStore", "NodeStat", "SessionEvent", "SessionState"]
