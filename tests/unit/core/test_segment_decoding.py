"""Segment metadata that is almost right is refused, naming the znode and the field."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from core.dlsn import DLSN
from core.errors import SegmentMetadataError
from core.segments import (
    ArchiveRef,
    SegmentMetadata,
    SegmentState,
    decode_segment,
    encode_segment,
)

pytestmark = pytest.mark.unit

GOOD = SegmentMetadata(
    sequence=3,
    ledger_id=17,
    state=SegmentState.IN_PROGRESS,
    first_txid=100,
    first_seq=40,
    created_ms=1_700_000_000_000,
    writer_region="us-east",
)


def altered(**fields: object) -> bytes:
    body = json.loads(encode_segment(GOOD))
    body.update(fields)
    return json.dumps(body).encode()


def test_a_good_segment_round_trips() -> None:
    assert decode_segment(encode_segment(GOOD), "/s/3") == GOOD


def test_an_archived_segment_whose_ledger_was_deleted_round_trips() -> None:
    done = GOOD.completed(120, DLSN(3, 9, 1), 25, 1_700_000_100_000, eos=False)
    archived = replace(done, archive=ArchiveRef("s3a://cold/ns/s/segment-3", 25, 1_700_000_200_000))
    assert not archived.archived_only, "archived, but the bookies still hold it"
    deleted = replace(archived, ledger_deleted=True)
    assert deleted.archived_only
    assert decode_segment(encode_segment(deleted), "/s/3") == deleted
    assert "archive" not in json.loads(encode_segment(done)), "absent until archived"


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"version": True}, "version True"),
        ({"version": 1.0}, "version 1.0"),
        ({"version": 2}, "version 2"),
        ({"sequence": True}, "'sequence'=True"),
        ({"ledger_id": "17"}, "'ledger_id'='17'"),
        ({"writer_region": 5}, "'writer_region'=5"),
        ({"end_of_stream": "no"}, "'end_of_stream'='no'"),
        ({"state": "paused"}, "'paused'"),
        ({"archive": "s3a://cold"}, "'archive'='s3a://cold'"),
        ({"archive": {"uri": "/cold", "records": "25", "archived_ms": 1}}, "'records'='25'"),
        ({"archive": {"records": 25, "archived_ms": 1}}, "'uri'"),
        ({"ledger_deleted": 1}, "'ledger_deleted'=1"),
    ],
)
def test_almost_right_metadata_is_refused_with_its_field(
    fields: dict[str, object], named: str
) -> None:
    with pytest.raises(SegmentMetadataError) as refused:
        decode_segment(altered(**fields), "/s/3")
    assert "/s/3" in str(refused.value) and named in str(refused.value)
