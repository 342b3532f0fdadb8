"""Micro-benchmark of the bookie client's codec hot paths: median and p99 µs per operation.

Run from the repository root:  .venv/bin/python -m benchmarks.codec [--quick]

Each operation is timed call by call with time.perf_counter_ns (the timer's own cost, measured
on an empty call, is subtracted), after a warm-up, with the garbage collector off while timing.
The messages are what a writer and a reader send and get back in steady state: a 1 KiB entry
behind a CRC32C digest, and the same entry read back; and a 64 KiB entry read back, arriving
whole or in four socket reads (which takes the decoder's buffering path).
"""

from __future__ import annotations

import gc
import platform
import statistics
import sys
import time
from collections.abc import Callable

from ledger.codecs.entry import DigestType, EntryCodec, master_key
from ledger.codecs.frames import FrameDecoder, encode_request, encode_response
from ledger.codecs.messages import AddRequest, AddResponse, ReadRequest, ReadResponse
from ledger.codes import StatusCode

ITERATIONS = 20_000
WARMUP = 2_000
LEDGER_ID = 1_234_567
ENTRY_ID = 98_765
TXN_ID = 4_242_424
PAYLOAD_BYTES = 1024
LARGE_PAYLOAD_BYTES = 64 * 1024


def _timer_overhead_ns(iterations: int) -> float:
    def empty() -> None:
        return None

    return statistics.median(_samples_ns(empty, iterations, 0))


def _samples_ns(op: Callable[[], object], iterations: int, overhead_ns: float) -> list[float]:
    clock = time.perf_counter_ns
    samples: list[float] = []
    append = samples.append
    for _ in range(iterations):
        start = clock()
        op()
        append(clock() - start - overhead_ns)
    return samples


def _operations() -> dict[str, Callable[[], object]]:
    codec = EntryCodec(LEDGER_ID, DigestType.CRC32C, b"password")
    key = master_key(b"password")
    payload = bytes(range(256)) * (PAYLOAD_BYTES // 256)
    large_payload = bytes(range(256)) * (LARGE_PAYLOAD_BYTES // 256)
    packet = codec.encode_entry(ENTRY_ID, ENTRY_ID - 1, 10 * PAYLOAD_BYTES, payload)
    large_packet = codec.encode_entry(ENTRY_ID, ENTRY_ID - 1, 10 * PAYLOAD_BYTES, large_payload)
    add = AddRequest(TXN_ID, LEDGER_ID, ENTRY_ID, key, packet)
    read = ReadRequest(TXN_ID, LEDGER_ID, ENTRY_ID)
    add_response = encode_response(AddResponse(TXN_ID, StatusCode.EOK, LEDGER_ID, ENTRY_ID))
    read_response = encode_response(
        ReadResponse(TXN_ID, StatusCode.EOK, LEDGER_ID, ENTRY_ID, packet, max_lac=ENTRY_ID - 1)
    )
    large_read_response = encode_response(
        ReadResponse(TXN_ID, StatusCode.EOK, LEDGER_ID, ENTRY_ID, large_packet)
    )
    decoder = FrameDecoder()  # one per connection, as the client has; fed one frame per call

    def feed_one(data: bytes) -> Callable[[], object]:
        def op() -> object:
            [message] = decoder.feed(data)
            return message

        return op

    def feed_in_reads(data: bytes, read_bytes: int) -> Callable[[], object]:
        chunks = [data[start : start + read_bytes] for start in range(0, len(data), read_bytes)]

        def op() -> object:
            messages = [message for chunk in chunks for message in decoder.feed(chunk)]
            assert len(messages) == 1
            return messages

        return op

    return {
        "encode AddRequest frame (1 KiB entry)": lambda: encode_request(add),
        "encode ReadRequest frame": lambda: encode_request(read),
        "decode AddResponse frame": feed_one(add_response),
        "decode ReadResponse frame (1 KiB entry)": feed_one(read_response),
        "decode ReadResponse frame (64 KiB entry)": feed_one(large_read_response),
        "decode ReadResponse 64 KiB in 16 KiB reads": feed_in_reads(large_read_response, 16384),
        "EntryCodec.encode_entry CRC32C 1 KiB": lambda: codec.encode_entry(
            ENTRY_ID, ENTRY_ID - 1, 10 * PAYLOAD_BYTES, payload
        ),
        "EntryCodec.decode_entry CRC32C 1 KiB": lambda: codec.decode_entry(packet, ENTRY_ID),
        "EntryCodec.decode_entry CRC32C 64 KiB": lambda: codec.decode_entry(large_packet, ENTRY_ID),
    }


def main(argv: list[str]) -> None:
    iterations = ITERATIONS // 10 if "--quick" in argv else ITERATIONS
    print(f"Python {sys.version.split()[0]} ({platform.python_implementation()}, {sys.platform})")
    print(f"{iterations} timed calls per operation after {WARMUP} warm-up calls\n")
    gc.collect()
    gc.disable()
    try:
        overhead_ns = _timer_overhead_ns(iterations)
        print(f"{'operation':<42} {'median µs':>10} {'p99 µs':>10}")
        for name, op in _operations().items():
            _samples_ns(op, WARMUP, overhead_ns)
            samples = sorted(_samples_ns(op, iterations, overhead_ns))
            median_us = statistics.median(samples) / 1000
            p99_us = samples[min(len(samples) - 1, int(len(samples) * 0.99))] / 1000
            print(f"{name:<42} {median_us:>10.2f} {p99_us:>10.2f}")
    finally:
        gc.enable()
    print(f"\n(timer overhead subtracted: {overhead_ns / 1000:.3f} µs per call)")


if __name__ == "__main__":
    main(sys.argv[1:])
