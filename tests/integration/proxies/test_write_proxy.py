"""Write proxies on the real cluster: writes over HTTP, redirects to the owner in another
region, ownership handed over, bad requests refused with their codes, capacity limits."""

from __future__ import annotations

import asyncio
import json
import struct
from collections.abc import AsyncIterator

import pytest

from core.dlsn import DLSN
from core.errors import (
    OutcomeUnknownError,
    SeqMismatchError,
    SessionFencedError,
    StreamNotFoundError,
)
from core.settings.limits import ProxyLimits
from global_meta.streams import LOCK_PREFIX
from localcluster.controller import Cluster
from localcluster.probes import wait_until
from region.bodies.batches import CONTENT_TYPE, encode_batch
from region.client import ProxyClient
from region.drain import set_drained
from region.write_proxy import WriteProxy
from tests.support.proxies import write_proxy
from tests.support.security import client_session, post_following
from tests.support.streams import fresh_namespace, stream_env


def base(proxy: WriteProxy, namespace: str) -> str:
    return f"{proxy.config.me.url}/v1/namespaces/{namespace}/streams"


async def test_records_written_through_a_proxy_are_read_back_in_another_region(
    cluster: Cluster,
) -> None:
    namespace = fresh_namespace()
    async with (
        write_proxy(cluster, "us-east") as east,
        client_session() as http,
    ):
        url = base(east, namespace)
        async with http.put(f"{url}/orders") as created:
            assert created.status == 201
        singles = []
        for i in range(5):
            async with http.post(f"{url}/orders/records", data=f"one-{i}".encode()) as answer:
                assert answer.status == 200, await answer.text()
                singles.append(await answer.json())
        batch = [f"bulk-{i}".encode() for i in range(300)]
        async with http.post(
            f"{url}/orders/bulk", data=encode_batch(batch), headers={"Content-Type": CONTENT_TYPE}
        ) as answer:
            assert answer.status == 200, await answer.text()
            bulk = (await answer.json())["records"]
        async with http.get(f"{url}/orders/last") as answer:
            assert (await answer.json())["dlsn"] == bulk[-1]["dlsn"]
        async with http.post(f"{url}/orders/release") as answer:
            assert (await answer.json()) == {"released": True}
    acked = singles + bulk
    assert [a["seq"] for a in acked] == list(range(305))
    async with stream_env(cluster, "eu-west", namespace) as west:
        reader = await west.reader("orders", follow=False)
        async with reader:
            records = [r async for r in reader]
    assert [r.payload for r in records] == [f"one-{i}".encode() for i in range(5)] + batch
    assert [str(r.dlsn) for r in records] == [a["dlsn"] for a in acked]


async def test_a_proxy_redirects_to_the_owner_in_another_region_and_ownership_moves(
    cluster: Cluster,
) -> None:
    namespace = fresh_namespace()
    async with (
        write_proxy(cluster, "us-east") as east,
        write_proxy(cluster, "eu-west") as west,
        client_session() as http,
    ):
        async with http.put(f"{base(east, namespace)}/s") as created:
            assert created.status == 201
        async with http.post(f"{base(east, namespace)}/s/records", data=b"a") as answer:
            assert answer.status == 200
        # eu-west does not own it: a redirect to us-east, followed with the body and the token
        redirected = f"{base(west, namespace)}/s/records"
        async with http.post(redirected, data=b"b", allow_redirects=False) as answer:
            assert answer.status == 307
            assert answer.headers["Location"].startswith(east.config.me.url)
            assert (await answer.json())["owner"] == f"{east.config.me.name}@us-east"
        status, body = await post_following(http, redirected, data=b"b")
        assert status == 200 and body["seq"] == 1
        async with http.post(f"{redirected}?hop=2", data=b"x") as answer:
            assert answer.status == 400 and (await answer.json())["code"] == "bad_request"
        for hop in ("-5", "3", "x"):  # no extra redirects bought with a negative count
            async with http.post(f"{redirected}?hop={hop}", data=b"x") as answer:
                refused = await answer.json()
            assert answer.status == 400 and "expected how often" in refused["message"], refused
        # us-east gives the stream up; eu-west takes it on its next write; us-east redirects
        async with http.post(f"{base(east, namespace)}/s/release") as answer:
            assert (await answer.json())["released"] is True
        async with http.post(redirected, data=b"c", allow_redirects=False) as answer:
            assert answer.status == 200, await answer.text()
            third = await answer.json()
        assert third["seq"] == 2 and DLSN.parse(third["dlsn"]).segment == 2  # a new epoch
        async with http.post(
            f"{base(east, namespace)}/s/records", data=b"d", allow_redirects=False
        ) as answer:
            assert answer.status == 307
            assert answer.headers["Location"].startswith(west.config.me.url)


BAD_REQUESTS = [
    ("POST", "/missing/records", b"x", {}, 404, "stream_not_found"),
    ("POST", "/s/bulk", b"", {}, 400, "bad_request"),
    ("POST", "/s/bulk", b"NOPE" + struct.pack(">I", 1), {}, 400, "bad_request"),
    (
        "POST",
        "/s/bulk",
        b"GLB1" + struct.pack(">I", 2) + struct.pack(">I", 1) + b"a",
        {},
        400,
        "bad_request",
    ),
    ("POST", "/s/bulk", b"GLB1" + struct.pack(">II", 1, 2_000_000), {}, 413, "record_too_large"),
    ("POST", "/s/records?txid=soon", b"x", {}, 400, "bad_request"),
    ("POST", "/s/records?txid=1", b"x", {}, 400, "txid_out_of_order"),
    ("POST", "/s/records", b"x" * (1024 * 1024 + 1), {}, 413, "record_too_large"),
    ("POST", "/s/truncate?to=1.x.0", b"", {}, 400, "invalid_dlsn"),
    ("POST", "/s/truncate", b"", {}, 400, "bad_request"),
    ("GET", "/s/records", b"", {}, 405, "method_not_allowed"),
    ("PUT", "/bad name!", b"", {}, 400, "invalid_stream_name"),
    ("PUT", "/s", b"", {}, 409, "stream_exists"),
    ("GET", "/s/nowhere", b"", {}, 404, "not_found"),
]


async def test_bad_requests_get_their_codes_and_harm_nothing(cluster: Cluster) -> None:
    namespace = fresh_namespace()
    limits = ProxyLimits(request_bytes_max=4 * 1024 * 1024)
    async with (
        write_proxy(cluster, "us-east", limits) as east,
        client_session() as http,
    ):
        url = base(east, namespace)
        async with http.put(f"{url}/s") as created:
            assert created.status == 201
        async with http.post(f"{url}/s/records", data=b"kept") as answer:
            assert answer.status == 200
        for method, path, body, headers, status, code in BAD_REQUESTS:
            async with http.request(method, url + path, data=body, headers=headers) as answer:
                reply = await answer.json()
                assert (answer.status, reply["code"]) == (status, code), (path, reply)
                assert reply["message"] and reply["retriable"] is False
        async with http.post(f"{url}/s/bulk", data=b"x" * (5 * 1024 * 1024)) as answer:
            assert answer.status == 413 and (await answer.json())["code"] == "request_too_large"
        # A record over 1 MiB is refused by its Content-Length, or as it arrives without one,
        # not buffered up to the request limit first.
        async with http.post(f"{url}/s/records", data=b"x" * (3 * 1024 * 1024)) as answer:
            refused = await answer.json()
            assert answer.status == 413 and refused["code"] == "record_too_large", refused

        async def chunks() -> AsyncIterator[bytes]:
            for _ in range(40):
                yield b"x" * 64 * 1024

        async with http.post(f"{url}/s/records", data=chunks()) as answer:
            refused = await answer.json()
            assert answer.status == 413 and "without a Content-Length" in refused["message"]
        async with http.post(f"{url}/s/records", data=b"still") as answer:
            assert answer.status == 200 and (await answer.json())["seq"] == 1
    async with stream_env(cluster, "us-east", namespace) as env:
        reader = await env.reader("s", follow=False)
        async with reader:
            assert [r.payload async for r in reader] == [b"kept", b"still"]


async def test_a_stream_over_its_bytes_in_flight_answers_over_capacity(cluster: Cluster) -> None:
    namespace = fresh_namespace()
    limits = ProxyLimits(stream_inflight_bytes_max=64 * 1024)
    async with (
        write_proxy(cluster, "us-east", limits) as east,
        client_session() as http,
    ):
        url = base(east, namespace)
        async with http.put(f"{url}/s") as created:
            assert created.status == 201

        async def post() -> tuple[int, str]:
            async with http.post(f"{url}/s/records", data=b"x" * 30_000) as answer:
                return answer.status, (await answer.json()).get("code", "")

        answers = await asyncio.gather(*(post() for _ in range(12)))
        assert {code for status, code in answers if status == 429} == {"over_capacity"}
        assert sum(status == 200 for status, _ in answers) >= 2
        assert all(status in (200, 429) for status, _ in answers), answers
        async with http.post(f"{url}/s/records", data=b"after") as answer:
            assert answer.status == 200


async def test_the_proxys_bytes_in_flight_over_every_stream_are_bounded(
    cluster: Cluster,
) -> None:
    namespace = fresh_namespace()
    limits = ProxyLimits(proxy_inflight_bytes_max=64 * 1024)
    async with (
        write_proxy(cluster, "us-east", limits) as east,
        client_session() as http,
    ):
        url = base(east, namespace)
        for stream in ("s1", "s2", "s3"):
            async with http.put(f"{url}/{stream}") as created:
                assert created.status == 201

        async def post(stream: str) -> tuple[int, str]:
            async with http.post(f"{url}/{stream}/records", data=b"x" * 30_000) as answer:
                body = await answer.json()
                return answer.status, body.get("message", "")

        answers = await asyncio.gather(*(post(f"s{1 + i % 3}") for i in range(12)))
        refused = [message for status, message in answers if status == 429]
        assert refused and all("over all its streams" in m for m in refused), answers
        assert all(status in (200, 429) for status, _ in answers), answers
        async with http.post(f"{url}/s2/records", data=b"after") as answer:
            assert answer.status == 200


async def test_the_client_follows_ownership_and_retries_through_a_proxy_restart(
    cluster: Cluster,
) -> None:
    namespace = fresh_namespace()
    async with write_proxy(cluster, "eu-west") as west:
        async with write_proxy(cluster, "us-east") as east:
            client = ProxyClient([east.config.me.url], namespace=namespace, deadline_s=30)
            async with client:
                await client.create("s")
                first = await client.write("s", b"one")
                assert (first.seq, first.dlsn.segment) == (0, 1)  # after the session marker
                await east.ownership.release(namespace, "s")
                async with (  # eu-west takes the stream
                    client_session() as http,
                    http.post(f"{base(west, namespace)}/s/records", data=b"two"),
                ):
                    pass
                acked = await client.write_bulk("s", [b"three", b"four"])  # redirected
                assert [a.seq for a in acked] == [2, 3]
                assert client._owners["s"] == west.config.me.url
        # us-east is gone; eu-west still owns the stream: the cached owner answers
        async with ProxyClient([east.config.me.url, west.config.me.url], namespace) as client:
            assert (await client.write("s", b"five")).seq == 4
            assert (await client.last_dlsn("s")) is not None
            with pytest.raises(StreamNotFoundError) as missing:
                await client.write("missing", b"x")
            assert "with HTTP 404" in missing.value.__notes__[0]


async def test_a_conditional_append_lands_at_its_sequence_id_or_not_at_all(
    cluster: Cluster,
) -> None:
    namespace = fresh_namespace()
    async with (
        write_proxy(cluster, "us-east") as east,
        ProxyClient([east.config.me.url], namespace=namespace) as client,
    ):
        await client.create("s")
        assert (await client.write("s", b"a", expected_seq=0)).seq == 0
        with pytest.raises(SeqMismatchError) as stale:
            await client.write("s", b"b", expected_seq=0)
        assert "with HTTP 409" in stale.value.__notes__[0]
        assert "expected sequence id 0; the next one is 1" in str(stale.value)
        racing = await asyncio.gather(
            *(client.write("s", f"r{i}".encode(), expected_seq=1) for i in range(10)),
            return_exceptions=True,
        )
        won = [r for r in racing if not isinstance(r, BaseException)]
        lost = [r for r in racing if isinstance(r, SeqMismatchError)]
        assert len(won) == 1 and won[0].seq == 1
        assert len(lost) == 9


async def test_session_writes_are_fenced_by_a_newer_session_and_by_a_new_owner(
    cluster: Cluster,
) -> None:
    namespace = fresh_namespace()
    async with (
        write_proxy(cluster, "us-east") as east,
        write_proxy(cluster, "eu-west") as west,
        ProxyClient([east.config.me.url], namespace=namespace) as first,
        ProxyClient([east.config.me.url], namespace=namespace) as second,
    ):
        await first.create("s")
        session = await first.start_session("s")
        assert (await first.write("s", b"a")).seq == 0
        newer = await second.start_session("s")
        assert newer > session
        with pytest.raises(SessionFencedError) as fenced:
            await first.write("s", b"stale")
        assert str(newer) in str(fenced.value)
        assert (await second.write_bulk("s", [b"b", b"c"]))[-1].seq == 2
        # a new owner starts a new session: the old owner's sessions are fenced
        await east.ownership.release(namespace, "s")
        async with (
            client_session() as http,
            http.post(f"{base(west, namespace)}/s/records", data=b"d") as taken,
        ):
            assert taken.status == 200
        with pytest.raises(SessionFencedError):
            await second.write("s", b"stale-too")
        assert (await second.start_session("s")) > newer
        assert (await second.write("s", b"e")).seq == 4
    async with stream_env(cluster, "us-east", namespace) as env:
        reader = await env.reader("s", follow=False)
        async with reader:
            assert [r.payload async for r in reader] == [b"a", b"b", b"c", b"d", b"e"]


async def test_a_stream_drained_in_a_region_moves_to_another_and_comes_back(
    cluster: Cluster,
) -> None:
    namespace = fresh_namespace()
    async with (
        write_proxy(cluster, "us-east") as east,
        write_proxy(cluster, "eu-west") as west,
        ProxyClient([east.config.me.url], namespace=namespace) as client,
        stream_env(cluster, "us-east", namespace) as env,
    ):
        await client.create("s")
        assert (await client.write("s", b"a")).seq == 0
        assert (await client.describe("s"))["owner"] == "wp-us-east@us-east"
        assert await set_drained(env.store, "us-east", namespace, "s", True)

        async def released() -> bool:  # the drain reaches us-east through its watch
            return (namespace, "s") not in east.ownership.owned_keys()

        await wait_until("us-east releasing the drained stream", released, 10.0)
        # us-east let the stream go; it sends its writes to eu-west, which takes it
        acked = await client.write("s", b"b")
        assert acked.seq == 1 and acked.dlsn.segment == 2
        assert (await client.describe("s"))["owner"] == "wp-eu-west@eu-west"
        assert (namespace, "s") not in east.ownership.owned_keys()
        assert (namespace, "s") in west.ownership.owned_keys()
        assert await set_drained(env.store, "us-east", namespace, "s", False)
        assert not await set_drained(env.store, "us-east", namespace, "s", False)
        assert (await client.write("s", b"c")).seq == 2  # stays with eu-west, the owner
    async with stream_env(cluster, "us-west", namespace) as reader_env:
        reader = await reader_env.reader("s", follow=False)
        async with reader:
            assert [r.payload async for r in reader] == [b"a", b"b", b"c"]


async def test_a_proxy_whose_writer_was_fenced_lets_the_stream_be_taken_again(
    cluster: Cluster,
) -> None:
    """A failed writer gives its lock up: otherwise the stream stays locked by a live proxy
    that no longer writes it, and every write fails until that proxy's process ends."""
    namespace = fresh_namespace()
    async with (
        write_proxy(cluster, "us-east") as east,
        ProxyClient([east.config.me.url], namespace=namespace, deadline_s=30) as client,
    ):
        await client.create("s")
        first = await client.write("s", b"a")
        owned = east.ownership.owned_here(namespace, "s")
        assert owned is not None
        async with stream_env(cluster, "us-west", namespace) as west:
            # another client fences the proxy's ledger, as a new owner's recovery would
            await west.ledgers.open(owned.writer.segment.ledger_id, recover_ledger=True)
        # Accepted, then fenced: the proxy cannot know whether a recovery kept the entry, so
        # the answer says its outcome is unknown, and a plain write is not sent again. (If the
        # writer learned of the fence first, it refused the write: a definite owner_fenced,
        # which the client sends again, to the proxy's new writer.)
        expected = [b"a", b"b", b"c"]
        try:
            await client.write("s", b"b")
        except OutcomeUnknownError as unknown:
            assert unknown.cause == "owner_fenced"
            expected.remove(b"b")  # here certainly absent: the recovery closed the ledger first
        second = await client.write("s", b"c")  # the failed writer was dropped: taken again
        assert second.dlsn.segment > first.dlsn.segment
        assert east.ownership.owned_here(namespace, "s") is not owned
    async with stream_env(cluster, "us-west", namespace) as west:
        reader = await west.reader("s", follow=False)
        async with reader:
            assert [r.payload async for r in reader] == expected


async def test_an_exclusive_session_refuses_writes_without_it_until_a_newer_session(
    cluster: Cluster,
) -> None:
    namespace = fresh_namespace()
    async with (
        write_proxy(cluster, "us-east") as east,
        ProxyClient([east.config.me.url], namespace=namespace) as holder,
        ProxyClient([east.config.me.url], namespace=namespace) as plain,
    ):
        await holder.create("s")
        assert (await plain.write("s", b"before")).seq == 0
        session = await holder.start_session("s", exclusive=True)
        with pytest.raises(SessionFencedError) as refused:
            await plain.write("s", b"no-session")
        assert f"exclusive write session {session}" in str(refused.value)
        held = await holder.write("s", b"held")
        assert held.seq == 1
        beat = await holder.heartbeat("s")
        assert beat["session"] == session and beat["exclusive"] is True
        assert DLSN.parse(beat["heartbeat_dlsn"]) > held.dlsn, "after what was written before"
        assert (await holder.write("s", b"held-2")).seq == 2
        newer = await plain.start_session("s")  # a newer, shared session ends the exclusive one
        assert newer > session
        assert (await plain.write("s", b"shared")).seq == 3
        with pytest.raises(SessionFencedError):
            await holder.write("s", b"stale")
    async with stream_env(cluster, "us-west", namespace) as west:
        reader = await west.reader("s", follow=False)
        async with reader:
            assert [r.payload async for r in reader] == [b"before", b"held", b"held-2", b"shared"]


async def test_concurrent_first_writes_to_a_new_stream_all_land(cluster: Cluster) -> None:
    """Requests that arrive while the proxy is taking the stream wait for it: none is told
    that the stream is locked by this very proxy (`owner_exists`)."""
    namespace = fresh_namespace()
    async with (
        write_proxy(cluster, "us-east") as east,
        client_session() as http,
    ):
        url = base(east, namespace)
        async with http.put(f"{url}/s") as created:
            assert created.status == 201

        async def post(i: int) -> tuple[int, str]:
            async with http.post(f"{url}/s/records", data=f"r{i}".encode()) as answer:
                return answer.status, await answer.text()

        answers = await asyncio.gather(*(post(i) for i in range(30)))
    assert all(status == 200 for status, _ in answers), answers


async def test_a_lock_node_of_the_proxys_own_session_that_it_does_not_hold_is_released(
    cluster: Cluster,
) -> None:
    """A lock created while the connection dropped, its answer lost and the create repeated,
    is an orphan of the proxy's own live session: the lowest lock node, naming this proxy,
    which no session end will ever remove. The proxy releases it and takes the stream, instead
    of answering `owner_exists` for as long as it lives."""
    namespace = fresh_namespace()
    async with write_proxy(cluster, "us-east") as east, client_session() as http:
        url = base(east, namespace)
        async with http.put(f"{url}/s") as created:
            assert created.status == 201
        streams = east.ownership.streams(namespace)
        me = east.config.me
        orphan = await east._store.create(
            f"{streams.path('s')}/lock/{LOCK_PREFIX}",
            json.dumps({"owner": me.name, "region": me.region}).encode(),
            ephemeral=True,
            sequential=True,
        )
        assert await streams.owner("s") == f"{me.name}@{me.region}"
        async with http.post(f"{url}/s/records", data=b"x") as answer:
            assert answer.status == 200, await answer.text()
        assert await east._store.exists(orphan) is None, "the orphan lock node is still there"
        async with http.post(f"{url}/s/records", data=b"y") as answer:
            assert answer.status == 200 and (await answer.json())["seq"] == 1
