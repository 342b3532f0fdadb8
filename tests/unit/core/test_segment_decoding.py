"""Segment metadata that is almost right is refused, naming the znode and the field."""

from __future__ import annotations

import json

import pytest

from core.errors import SegmentMetadataError
from core.segments import SegmentMetadata, SegmentState, decode_segment, encode_segment

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
    ],
)
def test_almost_right_metadata_is_refused_with_its_field(
    fields: dict[str, object], named: str
) -> None:
    with pytest.raises(SegmentMetadataError) as refused:
        decode_segment(altered(**fields), "/s/3")
    assert "/s/3" in str(refused.value) and named in str(refused.value)
