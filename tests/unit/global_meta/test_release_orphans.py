"""A proxy's orphaned lock nodes (global_meta/streams.py `release_orphans`): found through the
reads session when the caller asks for it, always deleted through the session that holds
them."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any, cast

import pytest

from global_meta import MetaSession
from global_meta.streams import StreamMetaStore

LOCK_DIR = "/globelog/namespaces/ns/streams/s/lock"


class Session:
    """A session over one lock queue: two nodes of wp@us-east, one held by session 7 (the
    main one's), one by session 9; and a node of another owner held by session 7."""

    def __init__(self, session_id: int) -> None:
        self.session_id = session_id
        self.calls: list[str] = []
        self.nodes = {
            "lock-0000000001": ("wp@us-east", 7),
            "lock-0000000002": ("wp@us-east", 9),
            "lock-0000000003": ("other@eu-west", 7),
        }

    async def children(self, path: str) -> list[str]:
        self.calls.append(f"children {path}")
        return sorted(self.nodes)

    async def get_many(self, paths: list[str]) -> list[tuple[bytes, Any] | None]:
        self.calls.append("get_many")
        found: list[tuple[bytes, Any] | None] = []
        for path in paths:
            owner, session = self.nodes[path.rsplit("/", 1)[1]]
            name, region = owner.split("@")
            body = json.dumps({"owner": name, "region": region}).encode()
            found.append((body, SimpleNamespace(ephemeral_owner=session)))
        return found

    async def delete(self, path: str, version: int = -1) -> None:
        self.calls.append(f"delete {path.rsplit('/', 1)[1]}")


@pytest.mark.parametrize("unordered", [False, True])
async def test_orphans_are_found_through_the_session_asked_for_and_deleted_through_the_main(
    unordered: bool,
) -> None:
    main, reads = Session(7), Session(8)
    streams = StreamMetaStore(cast(MetaSession, main), "ns", cast(MetaSession, reads))
    released = await streams.release_orphans("s", "wp@us-east", unordered=unordered)
    assert released == 1
    finder = reads if unordered else main
    assert finder.calls[:2] == [f"children {LOCK_DIR}", "get_many"]
    assert main.calls[-1] == "delete lock-0000000001"
    assert [c for c in main.calls if c.startswith("delete")] == ["delete lock-0000000001"]
    assert not any(c.startswith("delete") for c in reads.calls)
    if unordered:  # found through the reads session, confirmed through the main one
        assert main.calls == [f"children {LOCK_DIR}", "get_many", "delete lock-0000000001"]


async def test_no_orphan_in_the_reads_view_costs_the_main_session_nothing() -> None:
    main, reads = Session(7), Session(8)
    streams = StreamMetaStore(cast(MetaSession, main), "ns", cast(MetaSession, reads))
    assert await streams.release_orphans("s", "wp@eu-west", unordered=True) == 0
    assert main.calls == [] and reads.calls[:1] == [f"children {LOCK_DIR}"]
