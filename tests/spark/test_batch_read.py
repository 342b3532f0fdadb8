"""Batch reads through the `globelog` data source on the real cluster: the same records as a
direct library read, ranges inside segments, several streams, bad options refused up front."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest
from pyspark.sql import DataFrame, SparkSession

from core.records import LogRecord
from localcluster.controller import Cluster
from tests.support.streams import fresh_namespace, stream_env

RECORDS = 3000


async def write_stream(
    cluster: Cluster, namespace: str, stream: str, count: int
) -> list[LogRecord]:
    """A stream of `count` records over several segments; what a library reader reads back."""
    async with stream_env(cluster, "us-east", namespace) as env:
        await env.streams.create_stream(stream)
        writer = await env.writer(stream, segment_roll_bytes=20_000)
        for low in range(0, count, 250):
            high = min(count, low + 250)
            await writer.write_bulk([f"{stream}-{i:05d}".encode() * 3 for i in range(low, high)])
        await writer.close()
        reader = await env.reader(stream, follow=False)
        async with reader:
            return [r async for r in reader]


def load(spark: SparkSession, cluster: Cluster, namespace: str, **options: str) -> DataFrame:
    source = spark.read.format("globelog").option("topology", str(cluster.topology_path))
    return source.option("namespace", namespace).options(**options).load()


def as_records(df: DataFrame) -> list[tuple[object, ...]]:
    rows = df.orderBy("stream", "seq").collect()
    return [
        (r.stream, r.dlsn, r.txid, r.seq, bytes(r.payload), r.writer_region, r.write_time)
        for r in rows
    ]


def expected(stream: str, records: list[LogRecord]) -> list[tuple[object, ...]]:
    return [
        (
            stream,
            str(r.dlsn),
            r.txid,
            r.seq,
            r.payload,
            r.writer_region,
            datetime.fromtimestamp(r.write_time_ms / 1000, tz=UTC).replace(tzinfo=None),
        )
        for r in records
    ]


@pytest.fixture(scope="module")
def written(cluster: Cluster) -> tuple[str, list[LogRecord]]:
    namespace = fresh_namespace()
    return namespace, asyncio.run(write_stream(cluster, namespace, "orders", RECORDS))


def test_a_batch_read_equals_a_library_read_record_for_record(
    spark: SparkSession, cluster: Cluster, written: tuple[str, list[LogRecord]]
) -> None:
    namespace, records = written
    assert len({r.dlsn.segment for r in records}) >= 4, "the stream spans several segments"
    df = load(spark, cluster, namespace, stream="orders", entriesPerPartition="1")
    assert df.rdd.getNumPartitions() > len({r.dlsn.segment for r in records})
    assert as_records(df) == expected("orders", records)


@pytest.mark.parametrize("by", ["dlsn", "seq", "txid"])
def test_a_range_inside_segments_starts_and_ends_on_the_right_records(
    spark: SparkSession, cluster: Cluster, written: tuple[str, list[LogRecord]], by: str
) -> None:
    namespace, records = written
    first, end = 1234, 2345
    assert records[first].dlsn.slot > 0 and records[end].dlsn.slot > 0, "mid-entry positions"

    def value(record: LogRecord) -> str:
        return {"dlsn": str(record.dlsn), "seq": str(record.seq), "txid": str(record.txid)}[by]

    if by == "txid":  # txids repeat within a bulk write: the range is by txid, not by record
        low, high = records[first].txid, records[end].txid
        want = [r for r in records if low <= r.txid < high]
    else:
        want = records[first:end]
    df = load(
        spark,
        cluster,
        namespace,
        stream="orders",
        **{f"starting{by.capitalize()}": value(records[first])},
        **{f"ending{by.capitalize()}": value(records[end])},
    )
    assert as_records(df) == expected("orders", want)


def test_a_time_range_selects_the_records_written_in_it(
    spark: SparkSession, cluster: Cluster, written: tuple[str, list[LogRecord]]
) -> None:
    namespace, records = written
    low, high = records[700].write_time_ms, records[2600].write_time_ms
    start = datetime.fromtimestamp(low / 1000, tz=UTC).isoformat()
    df = load(spark, cluster, namespace, stream="orders", startingTime=start, endingTime=str(high))
    want = [r for r in records if low <= r.write_time_ms < high]
    assert want and as_records(df) == expected("orders", want)


def test_several_streams_are_read_in_one_query(spark: SparkSession, cluster: Cluster) -> None:
    namespace = fresh_namespace()
    a = asyncio.run(write_stream(cluster, namespace, "a", 300))
    b = asyncio.run(write_stream(cluster, namespace, "b", 200))
    df = load(spark, cluster, namespace, streams="a,b")
    assert as_records(df) == expected("a", a) + expected("b", b)
    counts = {r["stream"]: r["count"] for r in df.groupBy("stream").count().collect()}
    assert counts == {"a": 300, "b": 200}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"stream": "orders", "startingDlsn": "1.x.0"}, "startingdlsn: DLSN '1.x.0' is not"),
        ({"stream": "orders", "startingSeq": "-4"}, "startingseq is '-4'; expected an integer"),
        ({"stream": "orders", "startingSeq": "1", "startingTxid": "2"}, "expected at most one"),
        ({"stream": "orders", "endingTime": "yesterday"}, "ISO-8601 time with its zone"),
        ({"stream": "orders", "entriesPerPartition": "0"}, "entriesperpartition is '0'"),
        ({"stream": "orders", "startingseqq": "1"}, "unknown option 'startingseqq'"),
        ({"stream": "bad name"}, "stream name 'bad name'"),
        ({}, "no stream given"),
        ({"stream": "orders", "region": "mars"}, "region 'mars'; expected one of"),
    ],
)
def test_bad_options_are_refused_before_any_task_starts(
    spark: SparkSession, cluster: Cluster, options: dict[str, str], message: str
) -> None:
    with pytest.raises(Exception, match="globelog data source") as caught:
        load(spark, cluster, "default", **options).collect()
    assert message in str(caught.value)


def test_an_unknown_stream_is_named(spark: SparkSession, cluster: Cluster) -> None:
    with pytest.raises(Exception, match="missing-stream") as caught:
        load(spark, cluster, fresh_namespace(), stream="missing-stream").collect()
    assert "does not exist" in str(caught.value) or "not found" in str(caught.value)


def test_the_arrow_batches_have_the_schema_spark_expects(spark: SparkSession) -> None:
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import StructType

    from pipeline.batch import SCHEMA, arrow_schema

    expected = to_arrow_schema(StructType.fromDDL(SCHEMA), timezone="UTC")
    assert arrow_schema().equals(expected), (arrow_schema(), expected)


def test_a_batch_read_of_a_segment_still_being_written_returns_what_is_acknowledged(
    spark: SparkSession, cluster: Cluster
) -> None:
    """Regression: each task opened the segment's ledger afresh, knew no LAC, and refused
    to read entries the plan had seen acknowledged (ReadBeyondLacError)."""
    namespace = fresh_namespace()

    async def scenario() -> list[tuple[object, ...]]:
        async with stream_env(cluster, "us-east", namespace) as env:
            await env.streams.create_stream("live")
            writer = await env.writer("live", flush_sla_s=0.05)
            try:
                for low in range(0, 600, 100):
                    await writer.write_bulk([f"live-{i}".encode() for i in range(low, low + 100)])
                await asyncio.sleep(0.3)  # the flush SLA's control record carries the LAC on
                df = load(spark, cluster, namespace, stream="live", entriesPerPartition="2")
                return await asyncio.to_thread(as_records, df)
            finally:
                await writer.close()

    rows = asyncio.run(scenario())
    assert [bytes(r[4]) for r in rows] == [f"live-{i}".encode() for i in range(600)]
    assert {r[1].split(".")[0] for r in rows} == {"1"}, "one segment, still in progress"
