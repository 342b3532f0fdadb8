"""Waiting for a stream's lock through both sessions (global_meta/streams.py `acquire`): the
reads session's view may say "lowest" first, and is believed only for that; whether the node
vanished, or another owner stands first, is the main session's to say."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator
from types import SimpleNamespace
from typing import Any, cast

import pytest

from core.errors import MetadataUnavailableError, OwnershipError
from global_meta import MetaSession
from global_meta.streams import StreamMetaStore

MINE = "owner-0000000002"
GONE = "owner-0000000001"


class Session:
    """A session whose lock queue view is `views` (each yielded in turn, the last kept for
    ever), each after `delay_s`; or that fails its watch with `fails`."""

    def __init__(
        self,
        views: list[list[str]],
        delay_s: float = 0.0,
        fails: bool = False,
        mine: bytes | None = None,
    ):
        self.views, self.delay_s, self.fails = views, delay_s, fails
        self.session_id = 7
        self.mine = mine  # the body of the node named MINE, as this session sees it

    async def create(self, path: str, data: bytes = b"", **_: object) -> str:
        self.mine = data
        return f"{path.rsplit('/', 1)[0]}/{MINE}"

    async def watch_children(self, path: str) -> AsyncGenerator[list[str], None]:
        if self.fails:
            raise MetadataUnavailableError("the reads session is away")
        for view in self.views:
            await asyncio.sleep(self.delay_s)
            yield view
        await asyncio.Event().wait()

    async def sync(self, path: str) -> None:
        pass

    async def children(self, path: str) -> list[str]:
        return self.views[-1] if self.views else []

    async def get(self, path: str) -> tuple[bytes, Any]:
        if path.endswith(MINE) and self.mine is not None:
            return self.mine, SimpleNamespace(ephemeral_owner=7)
        body = json.dumps({"owner": "wp-gone", "region": "us-east"}).encode()
        return body, SimpleNamespace(ephemeral_owner=5)

    async def delete(self, path: str, **_: object) -> None:
        pass


def store(main: Session, reads: Session) -> StreamMetaStore:
    """Stores over the two sessions; the reads one sees the main one's node as it is made,
    unless it was given another body for it (a node of an earlier incarnation)."""
    streams = StreamMetaStore(cast(MetaSession, main), "ns", cast(MetaSession, reads))
    create = main.create

    async def creating(path: str, data: bytes = b"", **kwargs: object) -> str:
        if reads.mine is None:
            reads.mine = data
        return await create(path, data, **kwargs)

    main.create = creating  # type: ignore[method-assign]
    return streams


async def acquire_within(streams: StreamMetaStore, wait_s: float) -> tuple[bool, float]:
    loop = asyncio.get_running_loop()
    began = loop.time()
    try:
        await streams.acquire("s", "wp-b", "us-west", wait_s, "wp-gone@us-east")
    except OwnershipError:
        return False, loop.time() - began
    return True, loop.time() - began


async def test_the_reads_view_wins_the_lock_while_the_main_one_is_slow() -> None:
    main = Session([[GONE, MINE], [MINE]], delay_s=0.5)  # busy with other takes' writes
    reads = Session([[GONE, MINE], [MINE]], delay_s=0.01)
    won, took_s = await acquire_within(store(main, reads), 5.0)
    assert won and took_s < 0.3, took_s


@pytest.mark.parametrize(
    "reads",
    [
        Session([[GONE]], delay_s=0.01),  # a lagging server: no node of mine yet
        Session([[GONE, MINE]], delay_s=0.01),  # the gone owner still first there
        Session([], fails=True),  # the reads session away
    ],
    ids=["lagging", "still-queued", "away"],
)
async def test_the_main_view_decides_when_the_reads_one_does_not_show_it_lowest(
    reads: Session,
) -> None:
    main = Session([[GONE, MINE], [MINE]], delay_s=0.2)
    won, took_s = await acquire_within(store(main, reads), 5.0)
    assert won and 0.35 <= took_s < 2.0, took_s


async def test_a_node_of_the_same_name_in_an_earlier_incarnation_is_not_taken_for_mine() -> None:
    """The stream was deleted and made again: a stale view shows the old lock directory,
    where a node named as mine (another take's) was the lowest. Its token is not mine: the
    main view decides, here after 0.4 s."""
    old = json.dumps({"owner": "wp-x", "region": "eu-west", "token": "0" * 16}).encode()
    main = Session([[GONE, MINE], [MINE]], delay_s=0.2)
    reads = Session([[MINE]], delay_s=0.01, mine=old)
    won, took_s = await acquire_within(store(main, reads), 5.0)
    assert won and 0.35 <= took_s < 2.0, took_s


async def test_a_node_missing_from_the_reads_view_does_not_end_the_wait() -> None:
    """Only the main session's view says the node vanished: here it never does, and the wait
    runs to its bound."""
    main = Session([[GONE, MINE]], delay_s=0.01)
    reads = Session([[GONE]], delay_s=0.01)
    won, took_s = await acquire_within(store(main, reads), 0.5)
    assert not won and took_s >= 0.5, took_s
