"""Bounds of the read proxy: its table of streams whose read-ahead is being started holds an
entry only while a request starts or waits for one (names that do not exist, asked once each,
leave nothing behind; requests for one stream share one start), and a page holds at most
`page_bytes_max` of payloads."""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any, cast

import pytest

from core.dlsn import DLSN
from core.errors import OverCapacityError, QuotaExceededError, StreamNotFoundError
from core.records import LogRecord
from core.settings.limits import ProxyLimits
from region import read_proxy
from region.admission import quotas
from region.admission.slots import Slots, UnsentBytes
from region.bodies.pages import (
    ENCODE_SLICE_BYTES,
    ENCODE_SLICE_RECORDS,
    encode_slices,
    encoded_page,
    page_pieces,
    record_body,
    within_page_bytes,
)
from region.read_proxy import ReadProxy
from region.registry import ProxyInfo

pytestmark = pytest.mark.unit
KIB = 1024
MIB = 1024 * KIB


class FakeCache:
    started_count = 0

    def __init__(self, streams: Any, ledgers: Any, stream: str, **_: Any) -> None:
        self.stream = stream
        self.started = False
        self.gone = False
        self.closed = False
        self.start_seq: int | None = None
        self.holds_nothing = True
        self.paused = False

    async def start(self, seq: int) -> None:
        await asyncio.sleep(0.01)
        if self.stream.startswith("missing"):
            raise StreamNotFoundError(f"no stream {self.stream!r}")
        FakeCache.started_count += 1
        self.started = True
        self.start_seq = seq

    async def close(self) -> None:
        self.closed = True


def proxy(monkeypatch: pytest.MonkeyPatch) -> ReadProxy:
    monkeypatch.setattr(read_proxy, "StreamCache", FakeCache)
    me = ProxyInfo("rp-test", "us-east", "http://127.0.0.1:1")
    return ReadProxy(me, cast(Any, None), cast(Any, None))


async def test_names_that_do_not_exist_leave_no_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    server = proxy(monkeypatch)
    for i in range(500):
        with pytest.raises(StreamNotFoundError):
            await server._cache("ns", f"missing-{i}", 0, "client")
    assert server._starting == {} and server._caches == {}


async def test_concurrent_requests_share_one_start_and_leave_no_entry(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = proxy(monkeypatch)
    FakeCache.started_count = 0
    starts = [asyncio.create_task(server._cache("ns", "s", 0, "client")) for _ in range(20)]
    await asyncio.sleep(0)
    assert list(server._starting) == [("ns", "s")] and server._starting[("ns", "s")].users == 20
    caches = await asyncio.gather(*starts)
    assert len({id(c) for c in caches}) == 1 and FakeCache.started_count == 1
    assert server._starting == {}


def record(seq: int, size: int) -> LogRecord:
    return LogRecord(DLSN(1, seq, 0), seq, seq, b"x" * size, 0, "us-east")


@pytest.mark.parametrize(
    ("sizes", "kept"),
    [
        ([MIB] * 10, 4),  # 10 records of 1 MiB: a page of 4 MiB
        ([6 * MIB, 1], 1),  # one record over the bound still makes a page
        ([100] * 50, 50),
        ([3 * MIB, MIB, 1], 2),  # exactly the bound
        ([], 0),
    ],
)
def test_a_page_holds_at_most_its_bytes_and_at_least_one_record(
    sizes: list[int], kept: int
) -> None:
    records = [record(i, size) for i, size in enumerate(sizes)]
    assert ProxyLimits().page_bytes_max == 4 * MIB
    assert within_page_bytes(records, 4 * MIB) == records[:kept]


async def test_a_read_ahead_started_far_ahead_moves_back_for_a_reader_from_before_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = proxy(monkeypatch)
    poisoned = await server._cache(
        "ns", "s", 2**62, "client"
    )  # the stream's first request, far ahead
    honest = await server._cache("ns", "s", 5, "client")
    assert poisoned.closed and honest.start_seq == 5, "holding nothing, it starts again at 5"
    assert await server._cache("ns", "s", 2**62, "client") is honest, "never moved forward"
    honest.holds_nothing = False
    assert await server._cache("ns", "s", 0, "client") is honest, "holding records, it stays"


def test_a_page_joined_from_its_records_encodings_is_what_json_makes_of_the_page() -> None:
    """Pages are joined from records encoded one at a time (each kept by the read-ahead for
    every reader): the bytes must be those of the whole page encoded at once, binary payloads,
    producers, quotes and non-ASCII text included."""
    records = [
        LogRecord(DLSN(3, 1, 0), 7, 0, b"plain", 1_700_000_000_000, "us-east"),
        LogRecord(DLSN(3, 1, 1), 8, 1, b'"quoted"\n\xc3\xa9t\xc3\xa9', 1, "eu-west", 42, 9),
        LogRecord(DLSN(3, 2, 0), 9, 2, bytes(range(256)), 2, "us-west"),
        LogRecord(DLSN(3, 2, 1), 10, 3, os.urandom(MIB), 3, "us-west"),  # base64 added as is
        LogRecord(DLSN(3, 2, 2), 11, 4, "ünïcode \\ \t".encode() * 50_000, 4, "us-west"),
    ]
    for page in (records, records[:1], []):
        whole = {"records": [record_body(r) for r in page], "next_seq": 3}
        assert encoded_page(page, 3) == json.dumps(whole).encode()
    nothing = {"records": [], "next_seq": None}  # no record from the position asked
    assert b"".join(page_pieces([], None)) == json.dumps(nothing).encode()


@pytest.mark.parametrize(
    ("sizes", "runs"),
    [
        ([10] * 1200, [500, 500, 200]),  # small records: ENCODE_SLICE_RECORDS a slice
        ([512 * KIB] * 3, [1, 1, 1]),  # records past the bytes: one a slice
        ([100 * KIB] * 5, [2, 2, 1]),  # 200 KiB a slice: a third would pass 256 KiB
        ([MIB, 1, 1], [1, 2]),
        ([], []),
    ],
)
def test_a_page_is_encoded_in_slices_of_bounded_records_and_bytes(
    sizes: list[int], runs: list[int]
) -> None:
    """The read proxy encodes and sends a page one slice a turn of its loop: a slice is never
    empty, and past one record it holds at most the slice's records and bytes."""
    assert (ENCODE_SLICE_RECORDS, ENCODE_SLICE_BYTES) == (500, 256 * KIB)
    records = [record(i, size) for i, size in enumerate(sizes)]
    slices = list(encode_slices(records))
    assert [len(s) for s in slices] == runs
    assert [r for s in slices for r in s] == records
    for piece in slices:
        assert len(piece) == 1 or sum(len(r.payload) for r in piece) <= ENCODE_SLICE_BYTES


async def test_one_clients_long_polls_or_tails_leave_the_others_their_slots(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A client holding its share (`reads_per_client_max`, `tails_per_client_max`) is refused
    quota_exceeded, held first, while another client still gets a slot; the table of clients
    keeps only those holding one."""
    monkeypatch.setattr(quotas, "REFUSAL_HOLD_S", 0.01)
    holds = quotas.RefusalHolds(50)
    slots = Slots("streamed tails open", most=5, per_client=2, holds=holds)
    async with slots.slot("subject greedy"), slots.slot("subject greedy"):
        with pytest.raises(QuotaExceededError, match="subject greedy has 2 streamed tails"):
            async with slots.slot("subject greedy"):
                pass
        async with slots.slot("subject other"):
            assert slots.by_client == {"subject greedy": 2, "subject other": 1}
            async with slots.slot("subject third"), slots.slot("subject third"):
                with pytest.raises(OverCapacityError):  # the proxy's cap comes first
                    async with slots.slot("subject fourth"):
                        pass
    assert slots.taken == 0 and slots.by_client == {} and len(holds) == 0


async def test_unsent_bytes_hold_a_client_to_its_share_and_the_proxy_to_its_most(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A client may hold its share of answers not yet taken, or one answer of any size; the
    proxy its most, or one answer. Past them a page is refused (held first): quota_exceeded
    for the client's share, over_capacity for the proxy's. The table keeps only clients that
    hold bytes."""
    monkeypatch.setattr(quotas, "REFUSAL_HOLD_S", 0.01)
    holds = quotas.RefusalHolds(50)
    unsent = UnsentBytes(most=10 * MIB, per_client=4 * MIB, holds=holds)
    assert unsent.refusal("slow", 9 * MIB) is None  # nothing held: one page of any size goes
    with unsent.held("slow", 9 * MIB):
        assert unsent.over("slow") and not unsent.over("other")
        refused = unsent.refusal("slow")
        assert isinstance(refused, QuotaExceededError)
        assert "slow has 9437184 bytes of answers not yet taken" in str(refused)
        assert "a client's most is 4194304" in str(refused)
        with pytest.raises(QuotaExceededError):
            await unsent.refuse("slow", refused)
        assert unsent.refusal("other", 1 * MIB) is None  # exactly the proxy's most: let in
        assert isinstance(unsent.refusal("other", 1 * MIB + 1), OverCapacityError)
    assert unsent.used == 0 and unsent.by_client == {} and not unsent.over("slow")
    with unsent.held("slow", 3 * MIB):
        assert unsent.refusal("slow") is None  # under its share: the next page may be read
        assert unsent.refusal("slow", 1 * MIB) is None
        assert isinstance(unsent.refusal("slow", 1 * MIB + 1), QuotaExceededError)
        with unsent.held("slow", 1 * MIB):
            assert unsent.by_client == {"slow": 4 * MIB} and unsent.over("slow")
            assert isinstance(unsent.refusal("slow"), QuotaExceededError)
    assert unsent.used == 0 and unsent.by_client == {} and len(holds) == 0
