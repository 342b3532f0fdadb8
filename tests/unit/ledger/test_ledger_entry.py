"""Entry and explicit-LAC packets: golden bytes, round trips, and every corruption detected.

Golden packets were built by hand from DigestManager's layout and checked byte for byte against
BookKeeper 4.17.2's DigestManager for all four digest types.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import struct
import zlib

import crc32c
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ledger.codecs.entry import (
    DIGEST_BYTES,
    ENTRY_HEADER_BYTES,
    LAC_HEADER_BYTES,
    DigestType,
    Entry,
    EntryCodec,
    master_key,
)
from ledger.errors import DigestMismatchError

pytestmark = pytest.mark.unit

INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
ENTRY_ID = st.integers(min_value=0, max_value=2**63 - 1)
CHECKED = [DigestType.CRC32, DigestType.CRC32C, DigestType.HMAC]
HEADER = struct.pack(">qqqq", 12, 3, 2, 1000)  # ledger 12, entry 3, lac 2, length 1000


def test_golden_crc32c_entry() -> None:
    digest = crc32c.crc32c(HEADER + b"hello world").to_bytes(4, "big")
    packet = EntryCodec(12, DigestType.CRC32C, b"pw").encode_entry(3, 2, 1000, b"hello world")
    assert packet == HEADER + digest + b"hello world"
    assert packet.hex() == (
        "000000000000000c"
        "0000000000000003"
        "0000000000000002"
        "00000000000003e8"
        "6b99fb12" + b"hello world".hex()  # CRC-32C, as BookKeeper computes it
    )


def test_golden_crc32_entry_is_an_8_byte_long() -> None:
    packet = EntryCodec(12, DigestType.CRC32, b"pw").encode_entry(3, 2, 1000, b"hello world")
    value = zlib.crc32(HEADER + b"hello world")
    assert packet == HEADER + value.to_bytes(8, "big") + b"hello world"


def test_golden_hmac_entry_keys_with_sha1_of_mac_and_password() -> None:
    packet = EntryCodec(12, DigestType.HMAC, b"pw").encode_entry(3, 2, 1000, b"hello world")
    key = hashlib.sha1(b"macpw").digest()
    mac = hmac.new(key, HEADER + b"hello world", hashlib.sha1).digest()
    assert packet == HEADER + mac + b"hello world"


def test_golden_dummy_entry_has_no_digest() -> None:
    packet = EntryCodec(12, DigestType.DUMMY, b"pw").encode_entry(3, 2, 1000, b"hello world")
    assert packet == HEADER + b"hello world"


def test_golden_lac_packet() -> None:
    packet = EntryCodec(12, DigestType.CRC32C, b"pw").encode_lac(7)
    header = struct.pack(">qq", 12, 7)
    assert packet == header + crc32c.crc32c(header).to_bytes(4, "big")


def test_master_key_is_sha1_of_ledger_and_password() -> None:
    assert master_key(b"pw").hex() == "2aa226ba095b6969a64871977693b14671710d76"
    assert master_key(b"") == hashlib.sha1(b"ledger").digest()


@given(
    st.sampled_from(DigestType),
    ENTRY_ID,
    INT64,
    INT64,
    INT64,
    st.binary(max_size=200),
    st.binary(max_size=20),
)
def test_entry_round_trip(
    digest: DigestType,
    ledger_id: int,
    entry_id: int,
    lac: int,
    length: int,
    payload: bytes,
    password: bytes,
) -> None:
    codec = EntryCodec(ledger_id, digest, password)
    packet = codec.encode_entry(entry_id, lac, length, payload)
    assert len(packet) == ENTRY_HEADER_BYTES + DIGEST_BYTES[digest] + len(payload)
    entry = Entry(ledger_id, entry_id, lac, length, payload)
    assert codec.decode_entry(packet, entry_id) == entry
    assert codec.decode_last_entry(packet) == entry


@given(st.sampled_from(DigestType), ENTRY_ID, INT64)
def test_lac_round_trip(digest: DigestType, ledger_id: int, lac: int) -> None:
    codec = EntryCodec(ledger_id, digest, b"pw")
    packet = codec.encode_lac(lac)
    assert len(packet) == LAC_HEADER_BYTES + DIGEST_BYTES[digest]
    assert codec.decode_lac(packet) == lac


@pytest.mark.parametrize("digest", CHECKED)
@given(payload=st.binary(min_size=1, max_size=100), data=st.data())
def test_any_bit_flip_is_detected(digest: DigestType, payload: bytes, data: st.DataObject) -> None:
    codec = EntryCodec(12, digest, b"pw")
    packet = bytearray(codec.encode_entry(3, 2, 1000, payload))
    bit = data.draw(st.integers(0, len(packet) * 8 - 1))
    packet[bit // 8] ^= 1 << (bit % 8)
    with pytest.raises(DigestMismatchError):
        codec.decode_entry(bytes(packet), 3)


@pytest.mark.parametrize("digest", CHECKED)
@given(data=st.data())
def test_any_lac_bit_flip_is_detected(digest: DigestType, data: st.DataObject) -> None:
    codec = EntryCodec(12, digest, b"pw")
    packet = bytearray(codec.encode_lac(7))
    bit = data.draw(st.integers(0, len(packet) * 8 - 1))
    packet[bit // 8] ^= 1 << (bit % 8)
    with pytest.raises(DigestMismatchError):
        codec.decode_lac(bytes(packet))


@pytest.mark.parametrize("digest", list(DigestType))
def test_wrong_ledger_or_entry_is_detected_even_without_a_digest(digest: DigestType) -> None:
    packet = EntryCodec(12, digest, b"pw").encode_entry(3, 2, 1000, b"data")
    with pytest.raises(DigestMismatchError, match="packet is of entry 3"):
        EntryCodec(12, digest, b"pw").decode_entry(packet, 4)
    with pytest.raises(DigestMismatchError, match="packet is of ledger 12"):
        EntryCodec(13, digest, b"pw").decode_entry(packet, 3)
    with pytest.raises(DigestMismatchError, match="packet is of ledger 12"):
        EntryCodec(13, digest, b"pw").decode_lac(EntryCodec(12, digest, b"pw").encode_lac(1))


def test_hmac_with_another_password_is_detected() -> None:
    packet = EntryCodec(12, DigestType.HMAC, b"right").encode_entry(0, -1, 4, b"data")
    with pytest.raises(DigestMismatchError, match="HMAC digest does not match"):
        EntryCodec(12, DigestType.HMAC, b"wrong").decode_entry(packet, 0)


@pytest.mark.parametrize("digest", CHECKED)
def test_another_digest_type_is_detected(digest: DigestType) -> None:
    packet = EntryCodec(12, digest, b"pw").encode_entry(0, -1, 4, b"some data here")
    for other in CHECKED:
        if other is not digest:
            with pytest.raises(DigestMismatchError):
                EntryCodec(12, other, b"pw").decode_entry(packet, 0)


@pytest.mark.parametrize("digest", list(DigestType))
def test_short_packets_are_mismatches(digest: DigestType) -> None:
    codec = EntryCodec(12, digest, b"pw")
    packet = codec.encode_entry(3, 2, 1000, b"")
    for cut in range(len(packet)):
        with pytest.raises(DigestMismatchError):
            codec.decode_entry(packet[:cut], 3)
    lac = codec.encode_lac(1)
    for cut in range(len(lac)):
        with pytest.raises(DigestMismatchError):
            codec.decode_lac(lac[:cut])


@given(st.sampled_from(DigestType), st.binary(max_size=120))
def test_arbitrary_bytes_give_an_entry_or_a_mismatch(digest: DigestType, data: bytes) -> None:
    codec = EntryCodec(12, digest, b"pw")
    for decode in (lambda: codec.decode_entry(data, 3), lambda: codec.decode_lac(data)):
        with contextlib.suppress(DigestMismatchError):
            decode()
