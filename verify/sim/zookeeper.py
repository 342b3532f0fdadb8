"""A simulated ZooKeeper: the znode tree, versions, ephemeral nodes and sessions, in memory.

The same data operations as global_meta's MetaStore (create, get, exists, children, set,
delete, commit) with the same errors (core.errors), synchronous: the simulation delivers
each call as a message and applies it at one instant, as ZooKeeper's leader does. Sessions
are explicit: a client opens one, keeps it alive by being heard from, and the ensemble
expires it (deleting its ephemeral nodes) once it has been silent for its timeout.
tests/contract/test_zookeeper_contract.py runs the same cases against this and a real
ensemble (ZooKeeper 3.8 through MetaStore), which settled these details:

- A sequential name's suffix counts the parent's child creates, while its stat's
  children_version counts creates and deletes (ZooKeeper keeps the create count and reports
  2 * creates - children). A refused create and a rolled-back transaction count for neither.
- A transaction answers each op as ZooKeeper's multi does: the path for a create, the new
  stat for a set, True for a delete and for a check.
- A child of an ephemeral node is refused with a plain MetadataError (MetaStore has no
  narrower class for ZooKeeper's NoChildrenForEphemerals).

Data may be any value, not only bytes: the simulation stores its metadata as frozen objects
and skips the serialisation the real stores do.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from core import errors
from global_meta.store import ANY_VERSION, NodeStat, Op


@dataclass(slots=True)
class _Node:
    data: Any
    version: int = 0
    children_version: int = 0  # child creates and deletes, as ZooKeeper's stat reports it
    created_ms: int = 0
    modified_ms: int = 0
    ephemeral_owner: int = 0
    children: set[str] = field(default_factory=set)
    creates: int = 0  # children ever created: the next sequential suffix (deletes do not count)

    def stat(self) -> NodeStat:
        size = len(self.data) if isinstance(self.data, bytes | bytearray) else 0
        return NodeStat(
            self.version,
            self.children_version,
            self.created_ms,
            self.modified_ms,
            self.ephemeral_owner,
            len(self.children),
            size,
        )


@dataclass(slots=True)
class _Session:
    timeout_s: float
    last_heard_s: float
    ephemerals: set[str] = field(default_factory=set)


class SimZooKeeper:
    """One ZooKeeper ensemble's state. `now_s` is the simulation's clock (for stats and
    session expiry)."""

    def __init__(self) -> None:
        self._nodes: dict[str, _Node] = {"/": _Node(b"")}
        self._sessions: dict[int, _Session] = {}
        self._next_session = 0x1000
        self.now_s = 0.0

    # -- sessions ------------------------------------------------------------------------------

    def open_session(self, timeout_s: float) -> int:
        self._next_session += 1
        self._sessions[self._next_session] = _Session(timeout_s, self.now_s)
        return self._next_session

    def session_alive(self, session: int) -> bool:
        return session in self._sessions

    def heard_from(self, session: int) -> None:
        """The session's client was heard from (any request or a ping). SessionExpiredError
        when the session is gone."""
        known = self._sessions.get(session)
        if known is None:
            raise errors.SessionExpiredError(f"session {session:#x} expired")
        known.last_heard_s = self.now_s

    def silent_sessions(self) -> list[int]:
        """The sessions not heard from within their timeout (to be expired)."""
        return [
            sid for sid, s in self._sessions.items() if self.now_s - s.last_heard_s > s.timeout_s
        ]

    def ephemerals_of(self, session: int) -> set[str]:
        known = self._sessions.get(session)
        return set() if known is None else set(known.ephemerals)

    def expire_silent(self) -> list[int]:
        """Expires every session not heard from within its timeout; their ids."""
        silent = [
            sid for sid, s in self._sessions.items() if self.now_s - s.last_heard_s > s.timeout_s
        ]
        for sid in silent:
            self.close_session(sid)
        return silent

    def refresh_sessions(self) -> None:
        """Every session heard from now: a quorum formed again after none (a new leader gives
        each session a fresh timeout)."""
        for known in self._sessions.values():
            known.last_heard_s = self.now_s

    def close_session(self, session: int) -> None:
        """Ends a session (its client closed it, or it expired): its ephemerals go."""
        known = self._sessions.pop(session, None)
        if known is None:
            return
        for path in sorted(known.ephemerals, reverse=True):
            if path in self._nodes:
                self._remove(path)

    # -- data ----------------------------------------------------------------------------------

    def create(
        self,
        path: str,
        data: Any = b"",
        *,
        session: int | None = None,
        sequential: bool = False,
        make_parents: bool = False,
    ) -> str:
        """Creates a node (ephemeral when `session` is given); its path, with the sequence
        suffix when sequential."""
        _check_path(path, "create", allow_trailing_slash=sequential)
        parent_path = _parent(path)
        if parent_path not in self._nodes:
            if not make_parents:
                raise errors.NoNodeError(f"create {path!r}: no such node (its parent)")
            self._make_parents(parent_path)
        parent = self._nodes[parent_path]
        if parent.ephemeral_owner:
            raise errors.MetadataError(f"create {path!r}: ephemeral nodes may not have children")
        if sequential:
            path = f"{path}{parent.creates:010d}"  # as ZooKeeper numbers them
        if path in self._nodes:
            raise errors.NodeExistsError(f"create {path!r}: node already exists")
        if session is not None:
            self.heard_from(session)
        parent.children_version += 1
        parent.creates += 1
        parent.children.add(path.rsplit("/", 1)[1])
        now_ms = int(self.now_s * 1000)
        self._nodes[path] = _Node(data, 0, 0, now_ms, now_ms, session or 0)
        if session is not None:
            self._sessions[session].ephemerals.add(path)
        return path

    def get(self, path: str) -> tuple[Any, NodeStat]:
        node = self._node(path, "get")
        return node.data, node.stat()

    def exists(self, path: str) -> NodeStat | None:
        _check_path(path, "exists")
        node = self._nodes.get(path)
        return None if node is None else node.stat()

    def children(self, path: str) -> list[str]:
        return sorted(self._node(path, "children").children)

    def set(self, path: str, data: Any, *, version: int) -> NodeStat:
        node = self._node(path, "set")
        _check_version(node, version, "set", path)
        node.data = data
        node.version += 1
        node.modified_ms = int(self.now_s * 1000)
        return node.stat()

    def delete(self, path: str, *, version: int) -> None:
        node = self._node(path, "delete")
        _check_version(node, version, "delete", path)
        if node.children:
            raise errors.NotEmptyError(f"delete {path!r}: node has children")
        self._remove(path)

    def commit(
        self, ops: Sequence[Op], *, session: int | None = None
    ) -> list[str | NodeStat | bool]:
        """Runs `ops` atomically: all of them or none (the first failure is raised, naming
        its op index, as MetaStore.commit does). Answers per op: a create's path, a set's
        new stat, True for a delete or a check."""
        assert ops, "an empty transaction is a programming error"
        saved = {p: _copy(n) for p, n in self._nodes.items()}
        saved_ephemerals = {sid: set(s.ephemerals) for sid, s in self._sessions.items()}
        results: list[str | NodeStat | bool] = []
        try:
            for index, op in enumerate(ops):
                try:
                    results.append(self._apply(op, session))
                except errors.MetadataError as err:
                    failure = type(err)(f"commit op {index} ({op.kind}) {err}")
                    raise failure from err
        except errors.MetadataError:
            self._nodes = saved
            for sid, paths in saved_ephemerals.items():
                self._sessions[sid].ephemerals = paths
            raise
        return results

    def _apply(self, op: Op, session: int | None) -> str | NodeStat | bool:
        if op.kind == "create":
            owner = session if op.ephemeral else None
            assert not op.ephemeral or session is not None, "an ephemeral create needs a session"
            return self.create(op.path, op.data, session=owner)
        if op.kind == "set":
            return self.set(op.path, op.data, version=op.version)
        if op.kind == "delete":
            self.delete(op.path, version=op.version)
            return True
        assert op.kind == "check", op.kind
        node = self._node(op.path, "check")
        _check_version(node, op.version, "check", op.path)
        return True

    # -- helpers -------------------------------------------------------------------------------

    def _node(self, path: str, operation: str) -> _Node:
        _check_path(path, operation)
        node = self._nodes.get(path)
        if node is None:
            raise errors.NoNodeError(f"{operation} {path!r}: no such node")
        return node

    def _make_parents(self, path: str) -> None:
        missing = []
        while path not in self._nodes:
            missing.append(path)
            path = _parent(path)
        for each in reversed(missing):
            self.create(each)

    def _remove(self, path: str) -> None:
        node = self._nodes.pop(path)
        if node.ephemeral_owner and node.ephemeral_owner in self._sessions:
            self._sessions[node.ephemeral_owner].ephemerals.discard(path)
        parent = self._nodes[_parent(path)]
        parent.children.discard(path.rsplit("/", 1)[1])
        parent.children_version += 1


def _check_path(path: str, operation: str, *, allow_trailing_slash: bool = False) -> None:
    trailing_ok = allow_trailing_slash and path.endswith("/")
    if (
        not isinstance(path, str)
        or not path.startswith("/")
        or "//" in path
        or (path != "/" and path.endswith("/") and not trailing_ok)
    ):
        raise ValueError(
            f"{operation} {path!r}: a znode path is '/' or /name[/name...] without empty names"
        )


def _check_version(node: _Node, version: int, operation: str, path: str) -> None:
    if version not in (ANY_VERSION, node.version):
        raise errors.BadVersionError(
            f"{operation} {path!r}: version changed since it was read "
            f"(expected {version}, it is {node.version})"
        )


def _parent(path: str) -> str:
    head = path.rsplit("/", 1)[0]
    return head or "/"


def _copy(node: _Node) -> _Node:
    return _Node(
        node.data,
        node.version,
        node.children_version,
        node.created_ms,
        node.modified_ms,
        node.ephemeral_owner,
        set(node.children),
        node.creates,
    )
