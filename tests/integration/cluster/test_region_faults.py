"""Whole-region faults on the real cluster with its proxy processes: a region isolated
(ZooKeeper included) and a region down, with writes going on in the others."""

from __future__ import annotations

import asyncio

import pytest

from core.answers import ANSWERS
from core.errors import GlobelogError, MetadataUnavailableError, OutcomeUnknownError
from core.routes import publish_topology
from global_meta import MetaStore
from global_meta.faults import expire_session
from global_meta.store import SessionState
from global_meta.streams import StreamMetaStore
from ledger import audit_ledgers
from localcluster import controller, election_links, regions, wan
from localcluster.controller import Cluster
from localcluster.probes import zookeeper_mode, zookeeper_tls
from localcluster.tools import Tools
from region.client import Acked, ProxyClient
from region.isolation import cut_off_check
from tests.support import security
from tests.support.security import client_session
from tests.support.streams import fresh_namespace, stream_env

ZK_TLS = zookeeper_tls(security.SECURITY)

ZK_SETTLE_TIMEOUT_S = 30.0


def write_proxy_url(cluster: Cluster, region: str) -> str:
    proxy = cluster.topology.region(region).write_proxies[0]
    return f"https://{proxy.endpoint.host}:{proxy.endpoint.port}"


async def read_all(cluster: Cluster, region: str, namespace: str, count: int) -> list[bytes]:
    """Every record of the stream, read in `region` until `count` are there (bounded: a read
    at once may end one entry short until the LAC is carried past it, within the flush SLA)."""
    async with stream_env(cluster, region, namespace) as env:
        return [r.payload for r in await env.read_complete("s", count)]


async def owned_by(url: str) -> list[str]:
    async with (
        client_session() as http,
        http.get(url + "/v1/health") as answer,
    ):
        body = await answer.json()
        return list(body["owned"])


async def zk_serving(cluster: Cluster, region: str) -> bool:
    node = cluster.topology.zk_nodes_for(region)[0]
    return await zookeeper_mode(node.client, ZK_TLS) is not None


async def leader_region(cluster: Cluster) -> str:
    """The region whose ZooKeeper node leads now."""
    modes = {
        node.region: await zookeeper_mode(node.client, ZK_TLS)
        for node in cluster.topology.zookeeper
    }
    return next(region for region, mode in modes.items() if mode == "leader")


async def wait_for_a_leader_without(cluster: Cluster, gone: str) -> None:
    """Until the ZooKeeper nodes outside region `gone` are one leader and one follower."""
    others = [n for n in cluster.topology.zookeeper if n.region != gone]
    async with asyncio.timeout(10.0):
        modes = ["-"]
        while sorted(modes) != ["follower", "leader"]:
            await asyncio.sleep(0.1)  # polling servers
            modes = [await zookeeper_mode(n.client, ZK_TLS) or "-" for n in others]


async def wait_for_zk(cluster: Cluster, region: str, serving: bool) -> None:
    async with asyncio.timeout(ZK_SETTLE_TIMEOUT_S):
        while await zk_serving(cluster, region) != serving:  # noqa: ASYNC110 - polling a server
            await asyncio.sleep(0.2)


async def test_an_isolated_region_loses_its_streams_and_its_zombie_writes_fail(
    services: Cluster,
) -> None:
    namespace = fresh_namespace()
    east = write_proxy_url(services, "us-east")
    others = [write_proxy_url(services, r) for r in ("us-west", "eu-west")]
    async with (
        ProxyClient([east], namespace, deadline_s=30) as east_client,
        ProxyClient(others, namespace, deadline_s=60) as west_client,
        ProxyClient([east], namespace, deadline_s=3, request_timeout_s=3) as zombie_client,
    ):
        await east_client.create("s")
        acked: list[Acked] = [
            await east_client.write("s", f"before-{i}".encode()) for i in range(20)
        ]
        assert (await east_client.describe("s"))["owner"] == "wp-us-east@us-east"
        await regions.isolate(services, "us-east")
        try:
            await wait_for_zk(services, "us-east", serving=False)  # cut from the quorum
            # The isolated owner still believes it owns s: whatever it tries is refused.
            with pytest.raises(GlobelogError):
                await zombie_client.write("s", b"zombie")
            # Idempotent: a write redirected to the lost owner may get no answer, and only an
            # idempotent write may be sent again then (docs/http-api.md, "Errors").
            producer = west_client.producer("s")
            for i in range(20):
                acked.append(await producer.write(f"after-{i}".encode()))
            new_owner = (await west_client.describe("s"))["owner"]
        finally:
            await wan.heal(services.topology)
    assert not new_owner.endswith("@us-east"), new_owner
    assert [a.seq for a in acked] == list(range(40)), "every acknowledged write once, in order"
    await wait_for_zk(services, "us-east", serving=True)
    expected = [f"before-{i}".encode() for i in range(20)] + [
        f"after-{i}".encode() for i in range(20)
    ]
    assert await read_all(services, "eu-west", namespace, len(expected)) == expected
    # Back in the quorum, the old owner has dropped the stream it lost with its session.
    async with asyncio.timeout(ZK_SETTLE_TIMEOUT_S):
        while True:
            if f"{namespace}/s" not in await owned_by(write_proxy_url(services, "us-east")):
                break
            await asyncio.sleep(0.2)


async def test_a_client_cut_off_from_zookeeper_gives_its_session_up_and_gets_a_new_one(
    services: Cluster,
) -> None:
    """Its region's ZooKeeper node out of the quorum, a client hears from no server and kazoo
    would wait for the heal to learn its session expired. The store gives the session up
    after the session timeout: EXPIRED is published while the cut lasts, operations fail at
    once, and after the heal a new session connects."""
    node = services.topology.zk_nodes_for("us-east")[0]
    async with await MetaStore.connect(
        node.client.address, security.zk_login(), session_timeout_s=2.0
    ) as store:
        first = store.session_id
        events = store.session_events()
        await regions.isolate(services, "us-east")
        try:
            async with asyncio.timeout(ZK_SETTLE_TIMEOUT_S):
                while (await anext(events)).state is not SessionState.EXPIRED:
                    pass
            assert not await zk_serving(services, "us-east"), "EXPIRED came before the heal"
            with pytest.raises(MetadataUnavailableError, match="no ZooKeeper session"):
                await store.get("/")
        finally:
            await wan.heal(services.topology)
        async with asyncio.timeout(ZK_SETTLE_TIMEOUT_S):
            while (await anext(events)).state is not SessionState.CONNECTED:
                pass
        assert store.session_id not in (None, first)
        await store.get("/")


async def test_an_isolated_owner_lets_its_streams_go_before_the_heal(services: Cluster) -> None:
    namespace = fresh_namespace()
    east = write_proxy_url(services, "us-east")
    urls = [east] + [write_proxy_url(services, r) for r in ("us-west", "eu-west")]
    async with (
        ProxyClient([east], namespace, deadline_s=30) as east_client,
        ProxyClient(urls, namespace, deadline_s=60) as client,
    ):
        await east_client.create("s")
        await east_client.write("s", b"before")
        assert (await east_client.describe("s"))["owner"] == "wp-us-east@us-east"
        await regions.isolate(services, "us-east")
        try:
            await wait_for_zk(services, "us-east", serving=False)
            async with asyncio.timeout(ZK_SETTLE_TIMEOUT_S):
                while f"{namespace}/s" in await owned_by(east):  # noqa: ASYNC110 - polling
                    await asyncio.sleep(0.2)
            # Let go while still cut off; a client of every region's proxies writes on (a
            # us-east proxy it asks answers that it has no ZooKeeper and is passed over).
            assert not await zk_serving(services, "us-east")
            after = await client.producer("s").write(b"after")  # idempotent: sent again safely
            owner = (await client.describe("s"))["owner"]
        finally:
            await wan.heal(services.topology)
    assert after.seq == 1
    assert not owner.endswith("@us-east"), owner
    await wait_for_zk(services, "us-east", serving=True)


async def test_writes_go_on_through_a_region_down_and_stay_durable_in_two_regions(
    services: Cluster, tools: Tools
) -> None:
    namespace = fresh_namespace()
    west = write_proxy_url(services, "us-west")
    survivors = [write_proxy_url(services, r) for r in ("us-east", "eu-west")]
    async with ProxyClient([west], namespace, deadline_s=30) as west_client:
        await west_client.create("s")
        acked = [await west_client.write("s", f"before-{i}".encode()) for i in range(20)]
        assert (await west_client.describe("s"))["owner"] == "wp-us-west@us-west"
    killed = await regions.region_down(services, "us-west")
    try:
        assert {"zk-us-west", "wp-us-west", "rp-us-west"} <= set(killed)
        async with ProxyClient(survivors, namespace, deadline_s=60) as client:
            # Idempotent: a write redirected to the downed owner may get no answer (a reset
            # connection), and only an idempotent write may be sent again then.
            producer = client.producer("s")
            for i in range(20):
                acked.append(await producer.write(f"after-{i}".encode()))
            owner = (await client.describe("s"))["owner"]
        assert not owner.endswith("@us-west"), owner
        assert [a.seq for a in acked] == list(range(40))
        expected = [f"before-{i}".encode() for i in range(20)] + [
            f"after-{i}".encode() for i in range(20)
        ]
        for region in ("us-east", "eu-west"):
            assert await read_all(services, region, namespace, len(expected)) == expected, region
        # Every ensemble of every segment, before and after the loss, spans two regions.
        async with await MetaStore.of(services.topology, "us-east") as store:
            segments = await StreamMetaStore(store, namespace).segments("s")
            ledger_ids = [v.segment.ledger_id for v in segments]
            assert len(ledger_ids) >= 2, "the new owner wrote a new segment"
            min_regions = services.topology.replication.min_regions_for_durability
            reports, adhere = await audit_ledgers(store, ledger_ids, min_regions)
        assert adhere, reports
    finally:
        started = await regions.region_up(services, tools, "us-west")
    assert set(killed) == set(started)
    assert await read_all(services, "us-west", namespace, len(expected)) == expected


async def test_an_owner_paused_past_its_session_is_a_zombie_whose_writes_fail(
    services: Cluster, tools: Tools
) -> None:
    namespace = fresh_namespace()
    east = write_proxy_url(services, "us-east")
    others = [write_proxy_url(services, r) for r in ("us-west", "eu-west")]
    async with (
        ProxyClient([east], namespace, deadline_s=30) as east_client,
        ProxyClient(others, namespace, deadline_s=60, request_timeout_s=5) as other_client,
    ):
        await east_client.create("s")
        acked = [await east_client.write("s", f"before-{i}".encode()) for i in range(10)]
        await controller.fault(services, tools, "pause", "wp-us-east")
        try:
            # The zombie's request: accepted by its socket, answered only after it resumes.
            zombie = asyncio.create_task(east_client.write("s", b"zombie"))
            # Idempotent: a write redirected to the paused owner gets no answer, so its outcome
            # is unknown and only an idempotent write may be sent again (docs/http-api.md).
            producer = other_client.producer("s")
            for i in range(10):
                acked.append(await producer.write(f"after-{i}".encode()))
        finally:
            await controller.fault(services, tools, "resume", "wp-us-east")
        outcome = (await asyncio.gather(zombie, return_exceptions=True))[0]
        new_owner = (await other_client.describe("s"))["owner"]
    assert not new_owner.endswith("@us-east"), new_owner
    assert [a.seq for a in acked] == list(range(20))
    expected = [f"before-{i}".encode() for i in range(10)] + [
        f"after-{i}".encode() for i in range(10)
    ]
    if isinstance(outcome, OutcomeUnknownError):
        # It may have landed (after the others: the old owner's segment was sealed first).
        records = await read_all(services, "us-west", namespace, len(expected))
        assert records in (expected, [*expected, b"zombie"]), records
    elif isinstance(outcome, BaseException):
        assert isinstance(outcome, GlobelogError) and outcome.code in ANSWERS, outcome
        # a definite failure: the zombie's write is nowhere
        assert await read_all(services, "us-west", namespace, len(expected)) == expected
    else:
        records = await read_all(services, "us-west", namespace, len(expected) + 1)
        # answered after the resume, so by the new owner (redirected): it follows the others
        assert outcome.seq == 20 and records == [*expected, b"zombie"], outcome
    # the resumed proxy dropped the stream with its expired session
    async with asyncio.timeout(ZK_SETTLE_TIMEOUT_S):
        while f"{namespace}/s" in await owned_by(east):  # noqa: ASYNC110 - polling a server
            await asyncio.sleep(0.2)


async def test_the_zookeeper_leaders_region_down_leaves_a_serving_quorum_in_seconds(
    cluster: Cluster, tools: Tools
) -> None:
    """Regression: a follower used to decide to follow a new leader a WAN delay before that
    leader opened its peer port, got the connection through the WAN emulator closed, and the
    two remaining nodes kept missing each other (no quorum for minutes). Twice, so each of two
    leaders is taken down, with WAN latencies of the `realistic` shape when the topology has
    them (slower links widen that race)."""
    profile = "realistic" if "realistic" in cluster.topology.wan.profiles else cluster.profile
    await wan.configure_wan(cluster.topology, profile)
    try:
        for _ in range(2):
            leader = await leader_region(cluster)
            await regions.region_down(cluster, leader)
            try:
                # Until they notice, the others still call themselves followers of the dead
                # leader: wait for one of them to lead and the other to follow it.
                await wait_for_a_leader_without(cluster, leader)
            finally:
                await regions.region_up(cluster, tools, leader)
            for region in cluster.topology.region_names:
                await wait_for_zk(cluster, region, serving=True)
    finally:
        await wan.configure_wan(cluster.topology, cluster.profile)


async def test_isolating_the_zookeeper_leaders_region_cuts_its_election_links_too(
    cluster: Cluster,
) -> None:
    """Regression: a higher-numbered ZooKeeper node answers a lower one's connection by
    connecting straight back to the address the lower one advertises (its own listener, no
    WAN route), so a cut left those election links up: with the leader's region isolated,
    the other two kept hearing it lead, followed it, could not reach its (routed) quorum port,
    and had no leader until the heal. Now the cut resets them, and no direct link between the
    separated nodes is left; the two others elect a leader between them while it lasts."""
    leader = await leader_region(cluster)
    await regions.isolate(cluster, leader)
    try:
        cut = wan.routes_of(cluster.topology, leader)
        pairs = election_links.separated_nodes(cluster.topology, cut)
        listed = await election_links.established_sockets()
        assert listed is not None, "ss could not list the connections"
        assert election_links.bypassing_sockets(cluster.topology, pairs, listed) == []
        await wait_for_a_leader_without(cluster, leader)
    finally:
        await wan.heal(cluster.topology)
    for region in cluster.topology.region_names:
        await wait_for_zk(cluster, region, serving=True)


async def test_the_isolation_check_tells_the_isolated_region_from_the_others(
    cluster: Cluster,
) -> None:
    """What a proxy asks before giving its ZooKeeper session up: a region cut from the
    others reaches no bookie of theirs (cut off); the others still reach each other (an
    election is all their ZooKeeper servers are going through)."""
    published = publish_topology(cluster.topology)
    east = cut_off_check(lambda: published, "us-east")
    west = cut_off_check(lambda: published, "us-west")
    assert not await east() and not await west()
    await regions.isolate(cluster, "us-east")
    try:
        assert await east()
        assert not await west()
    finally:
        await wan.heal(cluster.topology)
    assert not await east()


async def tail_from(url: str, namespace: str, seq: int, want: int, bound_s: float) -> list[bytes]:
    """The records from `seq` on through a read proxy, polled until `want` of them arrived or
    `bound_s` passed."""
    path = f"{url}/v1/namespaces/{namespace}/streams/s/records"
    got: list[bytes] = []
    async with asyncio.timeout(bound_s), client_session() as http:
        while len(got) < want:
            query = {"from_seq": str(seq + len(got)), "wait_ms": "500"}
            async with http.get(path, params=query) as answer:
                page = await answer.json()
                assert answer.status == 200, page
            got += [r["payload"].encode() for r in page["records"]]
    return got


async def test_a_regions_read_proxy_follows_a_segment_written_on_through_its_outage(
    services: Cluster, tools: Tools
) -> None:
    # The segment's owner is in us-east: it writes on through us-west's outage, acknowledged by
    # the other regions' bookies, then replaces us-west's. us-west's bookies come back without
    # those entries and are no longer written to; a reader there whose next entry they were
    # meant to hold must not wait on their long poll for ever (found by `make demo`).
    namespace = fresh_namespace()
    east = write_proxy_url(services, "us-east")
    async with ProxyClient([east], namespace, deadline_s=60) as client:
        await client.create("s")
        for i in range(20):
            await client.write("s", f"before-{i}".encode())
        killed = await regions.region_down(services, "us-west")
        try:
            for i in range(20):
                await client.write("s", f"during-{i}".encode())
        finally:
            started = await regions.region_up(services, tools, "us-west")
        assert set(started) == set(killed)
        for i in range(10):
            await client.write("s", f"after-{i}".encode())
        assert (await client.describe("s"))["owner"] == "wp-us-east@us-east"
    expected = (
        [f"before-{i}".encode() for i in range(20)]
        + [f"during-{i}".encode() for i in range(20)]
        + [f"after-{i}".encode() for i in range(10)]
    )
    west = services.topology.region("us-west").read_proxies[0].endpoint
    url = f"https://{west.host}:{west.port}"
    assert await tail_from(url, namespace, 0, 50, 60) == expected


async def test_a_session_that_zookeeper_ended_is_made_again_at_home(cluster: Cluster) -> None:
    """When ZooKeeper ends a session (a paused process back, a long cut), the server closes its
    connection and kazoo's walk goes on to the next node of its list, which answers that the
    session expired; kazoo then makes the new session there, away from home, and would stay.
    The new session is made at the region's own node instead, with no move home needed."""
    region = cluster.topology.region_names[1]
    async with await MetaStore.of(cluster.topology, region, session_timeout_s=4.0) as store:
        homing = store.homing
        assert homing is not None, "a store of a region has no way home"
        first = store.session_id
        assert await homing.at_home() is True
        await expire_session(store)
        async with asyncio.timeout(ZK_SETTLE_TIMEOUT_S):
            while store.session_id in (None, first):  # noqa: ASYNC110 - polling kazoo
                await asyncio.sleep(0.05)
            while await homing.at_home() is None:  # noqa: ASYNC110 - connected, once made
                await asyncio.sleep(0.05)
        assert await homing.at_home() is True, "the new session was made away from home"
        assert homing.moves == 0, "it came home by a move, not by being made there"
        await store.create("/homing-test-", ephemeral=True, sequential=True)  # it serves


async def test_a_session_that_moved_to_another_regions_node_comes_back_after_the_heal(
    cluster: Cluster,
) -> None:
    """A process's session moves to another region's ZooKeeper node when its own stops
    serving (its region cut from the leader's); kazoo would leave it there, every read
    crossing the WAN, until that connection dropped. Once its own node serves again the
    session comes back to it: the same session, its ephemeral node kept."""
    leader = await leader_region(cluster)
    region = next(r for r in cluster.topology.region_names if r != leader)
    async with await MetaStore.of(cluster.topology, region, session_timeout_s=4.0) as store:
        homing = store.homing
        assert homing is not None, "a store of a region has no way home"
        first = store.session_id
        mine = await store.create("/homing-test-", ephemeral=True, sequential=True)
        assert await homing.at_home() is True
        await wan.partition(cluster.topology, region, leader)
        try:
            async with asyncio.timeout(ZK_SETTLE_TIMEOUT_S):
                while await homing.at_home() is not False:  # noqa: ASYNC110 - polling kazoo
                    await asyncio.sleep(0.1)
            assert store.session_id == first, "the session did not carry over to another node"
        finally:
            await wan.heal(cluster.topology)
        async with asyncio.timeout(ZK_SETTLE_TIMEOUT_S):
            while await homing.at_home() is not True:  # noqa: ASYNC110 - polling kazoo
                await asyncio.sleep(0.1)
        assert store.session_id == first
        assert homing.moves >= 1
        await store.get(mine)  # the ephemeral node is still there: the same session
