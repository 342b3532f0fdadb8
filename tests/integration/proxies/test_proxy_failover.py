"""Write proxy processes (`globelog serve write-proxy`, started by `cluster up`) on the real
cluster: the owner of a stream killed with SIGKILL, its writes resumed on another proxy."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import time

import aiohttp
import pytest

from core.errors import StreamNotFoundError
from localcluster import controller
from localcluster.controller import Cluster
from localcluster.tools import Tools
from region.client import Acked, ProxyClient
from tests.support.security import client_session, post_following
from tests.support.streams import fresh_namespace, stream_env


async def test_writes_resume_on_another_proxy_after_the_owner_is_killed(
    services: Cluster, tools: Tools
) -> None:
    topology = services.topology
    proxies = [p for region in topology.regions for p in region.write_proxies]
    urls = {p.name: f"https://{p.endpoint.host}:{p.endpoint.port}" for p in proxies}
    namespace = fresh_namespace()
    acked: list[Acked] = []
    async with ProxyClient(list(urls.values()), namespace, deadline_s=60) as client:
        await client.create("s")
        producer = client.producer("s")
        for i in range(50):
            acked.append(await producer.write(f"before-{i}".encode()))
        owner = (await client.describe("s"))["owner"]
        owner_name = owner.split("@")[0]
        assert owner_name in urls, owner
        await controller.fault(services, tools, "kill", owner_name)
        killed_at = time.monotonic()
        # Idempotent, so retried until a proxy takes over: a plain write sent down a kept-alive
        # connection to the killed owner gets no answer, and its outcome is unknown.
        acked.append(await producer.write(b"after-0"))
        resumed_s = time.monotonic() - killed_at
        # the last idempotent write retried on the new owner: answered, not written again
        retried = await client.write("s", b"before-49", producer=(producer.producer_id, 49))
        assert retried.duplicate and retried.dlsn == acked[49].dlsn
        for i in range(1, 50):
            acked.append(await producer.write(f"after-{i}".encode()))
        new_owner = (await client.describe("s"))["owner"]
    print(f"owner {owner} killed; {new_owner} acknowledged a write {resumed_s:.2f} s later")
    assert new_owner.split("@")[0] != owner_name
    assert [a.seq for a in acked] == list(range(100)), "every write once, in order"
    assert acked[50].dlsn.segment > acked[49].dlsn.segment, "the new owner writes a new epoch"
    async with stream_env(services, "us-west", namespace) as west:
        records = await west.read_complete("s", len(acked))  # once the LAC passes the last
    expected = [f"before-{i}".encode() for i in range(50)] + [
        f"after-{i}".encode() for i in range(50)
    ]
    assert [r.payload for r in records] == expected
    assert [r.dlsn for r in records] == [a.dlsn for a in acked]


PAUSE_S = 10.0  # longer than a session timeout (1.5 s here) and a takeover, with room


async def test_a_paused_owner_loses_its_stream_to_another_proxy_while_it_is_paused(
    services: Cluster, tools: Tools
) -> None:
    """SIGSTOP keeps the owner's sockets open and answers nothing: the client notices the
    silence (a probe unanswered), asks another proxy naming the owner unreachable, and that
    proxy takes the stream once the owner's ZooKeeper session ends, while the owner is still
    paused. Resumed, the old owner is fenced and every write stays once and in order."""
    topology = services.topology
    proxies = [p for region in topology.regions for p in region.write_proxies]
    urls = {p.name: f"https://{p.endpoint.host}:{p.endpoint.port}" for p in proxies}
    namespace = fresh_namespace()
    acked: list[Acked] = []
    async with ProxyClient(list(urls.values()), namespace, deadline_s=60) as client:
        await client.create("s")
        producer = client.producer("s")
        acked += [await producer.write(f"before-{i}".encode()) for i in range(20)]
        owner = (await client.describe("s"))["owner"]
        owner_name = owner.split("@")[0]
        others = [url for name, url in urls.items() if name != owner_name]
        async with client_session() as http:
            breaks_before = await lock_breaks(http, others)
        await controller.fault(services, tools, "pause", owner_name)
        paused_at = time.monotonic()
        try:
            acked.append(await producer.write(b"during"))
            resumed_s = time.monotonic() - paused_at
            assert resumed_s < PAUSE_S, "no write was acknowledged while the owner was paused"
            new_owner = (await client.describe("s"))["owner"]
            async with client_session() as http:
                # a paused process's address still takes connections: its lock went with
                # its session, and nobody broke it
                assert await lock_breaks(http, others) == breaks_before
        finally:
            await asyncio.sleep(max(0.0, PAUSE_S - (time.monotonic() - paused_at)))
            await controller.fault(services, tools, "resume", owner_name)
        acked += [await producer.write(f"after-{i}".encode()) for i in range(20)]
    print(f"owner {owner} paused; {new_owner} acknowledged a write {resumed_s:.2f} s later")
    assert new_owner != owner
    assert [a.seq for a in acked] == list(range(41)), "every write once, in order"
    async with stream_env(services, "us-west", namespace) as west:
        records = await west.read_complete("s", len(acked))
    assert [r.dlsn for r in records] == [a.dlsn for a in acked]
    # the resumed proxy serves again (its streams gone with its old session)
    deadline = time.monotonic() + 60
    while not (await controller.status(services))["processes"][owner_name]["healthy"]:
        assert time.monotonic() < deadline, f"{owner_name} did not recover after its pause"
        await asyncio.sleep(0.5)


def test_the_cli_goes_through_the_proxies_when_they_run(services: Cluster) -> None:
    namespace = fresh_namespace()

    def globelog(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
        command, *rest = args
        verb = [command] if command != "stream" else [command, rest.pop(0)]
        argv = [sys.executable, "-m", "cli.main", *verb, *rest, "--region", "us-east",
                "--topology", str(services.topology_path), "--namespace", namespace]  # fmt: skip
        return subprocess.run(argv, input=stdin, capture_output=True, timeout=60, check=False)

    assert globelog("stream", "create", "s").returncode == 0
    first = globelog("write", "s", stdin=b"one\ntwo\n")
    batch = globelog("write", "s", "--batch", stdin=b"three\nfour\n")
    assert first.returncode == 0 and batch.returncode == 0, first.stderr + batch.stderr
    acks = [json.loads(line) for line in (first.stdout + batch.stdout).splitlines()]
    assert [a["seq"] for a in acks] == [0, 1, 2, 3]
    # one writer (the proxy's) wrote all of it: one segment, not one per command
    assert {a["dlsn"].split(".")[0] for a in acks} == {"1"}
    described = json.loads(globelog("stream", "describe", "s").stdout)
    assert described["owner"] == "wp-us-east@us-east"
    through_proxy = globelog("read", "s", "--json")
    direct = globelog("read", "s", "--json", "--direct")
    assert through_proxy.stdout == direct.stdout
    assert [json.loads(line)["payload"] for line in through_proxy.stdout.splitlines()] == [
        "one", "two", "three", "four"
    ]  # fmt: skip
    refused = globelog("write", "s", stdin=b"five\n\nsix\n")
    assert refused.returncode == 2 and b"stdin line 2 is empty" in refused.stderr


async def test_the_proxies_export_their_metrics_for_prometheus(services: Cluster) -> None:
    topology = services.topology
    write = topology.region("us-east").write_proxies[0].endpoint
    read = topology.region("us-west").read_proxies[0].endpoint
    namespace = fresh_namespace()
    async with ProxyClient([f"https://{write.address}"], namespace) as client:
        await client.create("s")
        await client.write_bulk("s", [b"a", b"b", b"c"])
        with pytest.raises(StreamNotFoundError):
            await client.write("missing", b"x")
    async with client_session() as http:
        page = f"https://{read.address}/v1/namespaces/{namespace}/streams/s/records?from_seq=0"
        async with http.get(page) as answer:
            assert len((await answer.json())["records"]) == 3
        async with http.get(f"https://{write.address}/metrics") as answer:
            assert answer.status == 200 and answer.content_type == "text/plain"
            written = await answer.text()
        async with http.get(f"https://{read.address}/metrics") as answer:
            served = await answer.text()
    bulk = 'route="/v1/namespaces/{ns}/streams/{stream}/bulk"'
    assert re.search(r"globelog_proxy_requests_total\{[^}]*" + re.escape(bulk), written)
    assert "globelog_proxy_commit_latency_seconds_bucket" in written
    assert re.search(r'globelog_proxy_errors_total\{[^}]*code="stream_not_found"', written)
    assert re.search(r'globelog_proxy_ownership_changes_total\{[^}]*event="taken"', written)
    assert "globelog_ledger_adds_total" in written, "the ledger client's instruments too"
    delivered = re.search(r"globelog_proxy_delivered_records_total\{[^}]*\} (\d+)", served)
    assert delivered is not None and int(delivered.group(1)) >= 3
    cached = re.search(r'globelog_proxy_held_bytes\{[^}]*what="cache"[^}]*\} ([0-9.e+]+)', served)
    assert cached is not None and float(cached.group(1)) > 0, "the read-ahead holds s's records"
    assert re.search(r'globelog_proxy_held_bytes\{[^}]*what="unsent"', served)
    assert "globelog_proxy_delivery_latency_seconds_bucket" in served


async def test_a_proxy_told_the_owner_is_unreachable_queues_for_its_lock_and_takes_over(
    services: Cluster, tools: Tools
) -> None:
    """A request naming the owner the client could not reach waits at another proxy for the
    owner's session to end and is then served there (one request, no client polling); the
    same request naming a live owner is sent to it after the wait, and the owner keeps it."""
    topology = services.topology
    proxies = [p for region in topology.regions for p in region.write_proxies]
    urls = {p.name: f"https://{p.endpoint.host}:{p.endpoint.port}" for p in proxies}
    namespace = fresh_namespace()
    records = f"/v1/namespaces/{namespace}/streams/s/records"
    async with ProxyClient(list(urls.values()), namespace, deadline_s=60) as client:
        await client.create("s")
        await client.write("s", b"first")
        owner = (await client.describe("s"))["owner"]
        owner_name = owner.split("@")[0]
        other = next(name for name in urls if name != owner_name)
        async with client_session() as http:
            # a live owner named unreachable: after the wait, redirected to it; nothing moved
            async with http.post(
                urls[other] + records,
                data=b"x",
                params={"unreachable_owner": owner},
                allow_redirects=False,
            ) as answer:
                assert answer.status == 307, await answer.text()
                assert (await answer.json())["owner"] == owner
            assert (await client.describe("s"))["owner"] == owner
            await client.write("s", b"second")

            breaks_before = await lock_breaks(http, [urls[other]])
            await controller.fault(services, tools, "kill", owner_name)
            async with http.post(
                urls[other] + records,
                data=b"third",
                params={"unreachable_owner": owner},
                allow_redirects=False,
            ) as answer:
                body = await answer.json()
                assert answer.status == 200, body  # not a redirect to the dead owner
            # nothing listened at the killed owner's address: its lock was broken, not
            # waited out until ZooKeeper ended its session
            assert await lock_breaks(http, [urls[other]]) == breaks_before + 1
        assert (await client.describe("s"))["owner"].split("@")[0] == other
        assert (await client.write("s", b"fourth")).seq == 3


async def lock_breaks(http: aiohttp.ClientSession, urls: list[str]) -> int:
    """How many locks of gone owners these proxies broke, from their /metrics."""
    found = 0
    for url in urls:
        async with http.get(url + "/metrics") as answer:
            assert answer.status == 200, await answer.text()
            text = await answer.text()
        counted = re.search(
            r'globelog_proxy_ownership_changes_total\{[^}]*event="lock_broken"[^}]*\} (\d+)', text
        )
        found += int(counted.group(1)) if counted else 0
    return found


async def test_a_traced_request_leaves_its_spans_at_the_proxies_it_reached(
    services: Cluster,
) -> None:
    """A write carrying a sampled W3C traceparent is traced at each proxy it reached: the
    server span (continuing the caller's span), its redirect or its commit, in /debug/traces."""
    topology = services.topology
    proxies = [p for region in topology.regions for p in region.write_proxies]
    urls = {p.name: f"https://{p.endpoint.host}:{p.endpoint.port}" for p in proxies}
    namespace = fresh_namespace()
    async with ProxyClient(list(urls.values()), namespace) as client:
        await client.create("s")
        await client.write("s", b"first")
        owner_name = (await client.describe("s"))["owner"].split("@")[0]
    other = next(name for name in urls if name != owner_name)
    trace_id, caller_span = os.urandom(16).hex(), os.urandom(8).hex()
    headers = {"traceparent": f"00-{trace_id}-{caller_span}-01"}
    route = "/v1/namespaces/{ns}/streams/{stream}/records"
    async with client_session() as http:
        path = f"/v1/namespaces/{namespace}/streams/s/records"
        status, body = await post_following(
            http, urls[other] + path, data=b"traced", headers=headers
        )
        assert status == 200, body  # redirected to the owner
        spans = {}
        for name in (other, owner_name):
            async with http.get(
                urls[name] + "/debug/traces", params={"trace_id": trace_id}
            ) as answer:
                spans[name] = (await answer.json())["spans"]
        async with http.get(urls[other] + "/debug/traces", params={"trace_id": "xyz"}) as answer:
            assert answer.status == 400
            assert "32 lowercase hex digits" in (await answer.json())["message"]
    (redirect,) = spans[other]
    assert redirect["name"] == f"POST {route}" and redirect["kind"] == "SERVER"
    assert redirect["parent_span_id"] == caller_span
    assert redirect["attributes"]["http.response.status_code"] == 307
    assert redirect["attributes"]["globelog.stream"] == "s"
    by_name = {s["name"]: s for s in spans[owner_name]}
    server, commit = by_name[f"POST {route}"], by_name["globelog.commit"]
    assert server["parent_span_id"] == caller_span
    assert server["attributes"]["http.response.status_code"] == 200
    assert commit["parent_span_id"] == server["span_id"]
    assert commit["attributes"]["globelog.records"] == 1
    assert commit["duration_ms"] <= server["duration_ms"]


async def test_an_owner_whose_session_zookeeper_expired_lets_its_streams_go(
    services: Cluster, tools: Tools
) -> None:
    """`globelog cluster expire-session` makes the ensemble itself end the owner's session
    (a second client joins it with the credentials the proxy keeps in its session file and
    closes it): the proxy is told by a server, gets a new session, and every write is
    answered once, in order, across the change of epoch."""
    from global_meta.faults import read_session_file
    from localcluster import plan

    topology = services.topology
    urls = [
        f"https://{p.endpoint.host}:{p.endpoint.port}"
        for region in topology.regions
        for p in region.write_proxies
    ]
    namespace = fresh_namespace()
    async with ProxyClient(urls, namespace, deadline_s=60) as client:
        await client.create("s")
        producer = client.producer("s")
        acked = [await producer.write(f"before-{i}".encode()) for i in range(20)]
        owner = (await client.describe("s"))["owner"].split("@")[0]
        session_file = plan.session_file(services.data_dir, owner)
        old_session, _ = read_session_file(session_file)
        said = await controller.expire_session(services, owner)
        assert f"{old_session:#x}" in said and owner in said
        deadline = time.monotonic() + 30
        while read_session_file(session_file)[0] == old_session:
            assert time.monotonic() < deadline, "the proxy never published a new session"
            await asyncio.sleep(0.2)
        acked += [await producer.write(f"after-{i}".encode()) for i in range(20)]
    assert [a.seq for a in acked] == list(range(40)), "every write once, in order"
    assert acked[20].dlsn.segment > acked[19].dlsn.segment, "a new epoch after the expiry"
    log = (services.data_dir / "logs" / f"{owner}.log").read_text()
    assert "expired" in log.lower()
    assert os.stat(session_file).st_mode & 0o077 == 0, "credentials readable by the owner only"


async def test_expire_session_refuses_what_is_not_a_write_proxy(services: Cluster) -> None:
    with pytest.raises(Exception, match="expected a write proxy"):
        await controller.expire_session(services, "no-such-proxy")
