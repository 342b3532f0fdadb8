"""Who may touch the deployment's ZooKeeper (docs/security.md): sessions over TLS logged in as
its user (SASL DIGEST-MD5, the secret `globelog security init` made) and nobody else. On the
real ensemble: a client in clear, or one trusting another CA, gets no session; an anonymous
client over TLS can neither read nor write a globelog or BookKeeper znode; a wrong password
gets no session; and every znode the deployment made (by globelog or by the bookies) is its
user's alone, so a session of any other identity could not touch it either."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import ssl
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.security import ACL, Id, Permissions

from core import errors
from core.records import Record
from core.routes import TOPOLOGY_ZNODE
from core.security import pki
from core.security.secrets import ZK_USER, ZkLogin, ZkTls, zk_tls
from core.security.settings import LEDGER_ROLE
from global_meta import MetaStore
from global_meta.store import kazoo_login
from ledger import LEDGERS_ROOT
from localcluster.controller import Cluster
from localcluster.plan import ZK_SYNC_LIMIT_TICKS, ZK_TICK_MS
from tests.support import security
from tests.support.security import SECURITY
from tests.support.streams import fresh_namespace, stream_env

SESSION_S = 10.0
FOREIGN = f"/intruder-{uuid.uuid4().hex[:8]}"
DEPLOYMENT_TLS = zk_tls(SECURITY)
assert DEPLOYMENT_TLS is not None, "the tests' deployment has TLS on"
OUR_LOGIN = Id("sasl", ZK_USER)

# how long a handshaken election connection must stay open to count as accepted: below the
# local nodes' quorum socket timeout, tickTime x syncLimit (localcluster/plan.py)
QUIET_PEER_WAIT_S = 0.6 * ZK_TICK_MS * ZK_SYNC_LIMIT_TICKS / 1000


def ours(entry: ACL) -> bool:
    """An ACL entry granting only the deployment's identities: its SASL user, or (on znodes
    the bookies made for their session's every identity) its client certificate."""
    certificate = entry.id.scheme == "x509" and f"OU=0:{LEDGER_ROLE}" in entry.id.id
    return entry.perms == Permissions.ALL and (entry.id == OUR_LOGIN or certificate)


def in_session(
    hosts: str,
    login: ZkLogin | None,
    work: Callable[[KazooClient], Any],
    tls: ZkTls | None = DEPLOYMENT_TLS,
    start_s: float = SESSION_S,
) -> Any:
    """`work` in a session as `login` (None: anonymous, over `tls` if given)."""
    client = KazooClient(hosts=hosts, timeout=SESSION_S, **kazoo_login(login, tls))
    try:
        client.start(start_s)
        return work(client)
    finally:
        client.stop()
        client.close()


def anonymous_attempt(hosts: str, work: Callable[[KazooClient], Any]) -> str:
    """What an anonymous session's one request got: the name of the error it raised."""

    def attempt(client: KazooClient) -> str:
        try:
            work(client)
        except KazooException as err:
            return type(err).__name__
        return "served"

    return in_session(hosts, None, attempt)


async def test_an_anonymous_client_can_neither_read_nor_write_metadata(cluster: Cluster) -> None:
    namespace = fresh_namespace()
    async with stream_env(cluster, "us-east", namespace) as env:
        await env.streams.create_stream("s")
        stream_root = f"/globelog/namespaces/{namespace}"
        assert await env.store.exists(stream_root), "the test's stream metadata is where named"
    hosts = cluster.topology.zk_connect
    attempts: dict[str, Callable[[KazooClient], Any]] = {
        "read the topology": lambda c: c.get(TOPOLOGY_ZNODE),
        "list the streams": lambda c: c.get_children(stream_root),
        "read a stream's segments": lambda c: c.get_children(f"{stream_root}/streams/s"),
        "list the bookies": lambda c: c.get_children(f"{LEDGERS_ROOT}/available"),
        "list the ledgers": lambda c: c.get_children(LEDGERS_ROOT),
        "rewrite the topology": lambda c: c.set(TOPOLOGY_ZNODE, b"{}"),
        "register a bookie": lambda c: c.create(f"{LEDGERS_ROOT}/available/6.6.6.6:3181"),
        "add a znode to globelog's": lambda c: c.create(f"/globelog{FOREIGN}"),
        "add a znode at the root": lambda c: c.create(FOREIGN),
        "delete a stream": lambda c: c.delete(stream_root, recursive=True),
    }
    got = {
        what: await asyncio.to_thread(anonymous_attempt, hosts, work)
        for what, work in attempts.items()
    }
    assert all(answer != "served" for answer in got.values()), got
    async with await MetaStore.of(cluster.topology) as store:
        for path in (f"/globelog{FOREIGN}", FOREIGN, f"{LEDGERS_ROOT}/available/6.6.6.6:3181"):
            assert not await store.exists(path), f"an anonymous client created {path}"
        assert await store.exists(stream_root), "an anonymous client deleted a stream"
        data, _ = await store.get(TOPOLOGY_ZNODE)
        assert data != b"{}", "an anonymous client rewrote the topology"


async def test_a_client_in_clear_or_without_the_deployments_certificates_gets_no_session(
    cluster: Cluster, tmp_path: Path
) -> None:
    """ZooKeeper's client port is TLS only: a client speaking in clear is never answered; a
    client without a certificate, or with one of another CA, is refused by the server; a
    client that verifies against another CA refuses the server. Even with the password."""
    now = datetime.datetime.now(datetime.UTC)
    other = pki.Authority.make("another deployment", now)
    other.save(tmp_path / "other-ca.pem", tmp_path / "other-ca.key")
    cert, key = other.issue("intruder", now, role=LEDGER_ROLE)
    pki.write_host(tmp_path / "c.pem", tmp_path / "c.key", cert, key)
    refused = {
        "in clear": None,
        "no certificate": ZkTls(SECURITY.ca_cert),
        "another CA's certificate": ZkTls(SECURITY.ca_cert, tmp_path / "c.pem", tmp_path / "c.key"),
        "trusting another CA": dataclasses.replace(DEPLOYMENT_TLS, ca=tmp_path / "other-ca.pem"),
    }
    for tls in refused.values():
        with pytest.raises((KazooTimeoutError, KazooException)):
            await asyncio.to_thread(
                in_session, cluster.topology.zk_connect, None, lambda c: c.get("/"), tls, 3.0
            )
        login = ZkLogin(ZK_USER, security.zk_login().password, tls)
        with pytest.raises(errors.MetadataUnavailableError, match="no session within"):
            await MetaStore.connect(cluster.topology.zk_connect, login, connect_timeout_s=3.0)


async def test_a_wrong_password_gets_no_session(cluster: Cluster) -> None:
    wrong = ZkLogin(ZK_USER, "not-the-deployment-secret-" + uuid.uuid4().hex, DEPLOYMENT_TLS)
    with pytest.raises(errors.ConfigError, match="refused a login as 'globelog'"):
        await MetaStore.connect(cluster.topology.zk_connect, wrong, connect_timeout_s=4.0)


async def test_a_refusal_seen_late_is_still_a_refusal(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kazoo reports the session, the server refuses the login, and the state moves on to
    CLOSED, all before a loaded machine wakes the thread waiting in `start`: that thread sees
    no session at all. It is still a refused login, not an unreachable ZooKeeper."""

    def late_start(client: KazooClient, timeout: float = 15.0) -> None:
        client.start_async()
        time.sleep(1.5)  # the refusal and the close happen meanwhile
        if not client.connected:
            raise KazooTimeoutError("Connection time-out")

    monkeypatch.setattr(KazooClient, "start", late_start)
    wrong = ZkLogin(ZK_USER, "not-the-deployment-secret-" + uuid.uuid4().hex, DEPLOYMENT_TLS)
    with pytest.raises(errors.ConfigError, match="refused a login as 'globelog'"):
        await MetaStore.connect(cluster.topology.zk_connect, wrong, connect_timeout_s=4.0)


async def test_every_znode_of_the_deployment_is_its_users_alone(cluster: Cluster) -> None:
    """globelog's znodes and the bookies' own (registrations, cookies, ledger layout): an ACL
    of exactly the deployment's user, with every permission; the world has none."""
    # a ledger and a stream, so their znodes are among those walked
    async with stream_env(cluster, "us-east", fresh_namespace()) as env:
        await env.streams.create_stream("s")
        writer = await env.writer("s")
        await writer.write(Record(b"one"))
        await writer.close()

    def walk(client: KazooClient) -> dict[str, list[ACL]]:
        found: dict[str, list[ACL]] = {}
        pending = [f"/{child}" for child in client.get_children("/") if child != "zookeeper"]
        while pending:
            path = pending.pop()
            acl, _ = client.get_acls(path)
            found[path] = acl
            pending += [f"{path}/{child}" for child in client.get_children(path)]
        return found

    acls = await asyncio.to_thread(
        in_session, cluster.topology.zk_connect, security.zk_login(), walk
    )
    assert any(path.startswith(f"{LEDGERS_ROOT}/available/") for path in acls), sorted(acls)
    assert any(path.startswith("/globelog/namespaces/") for path in acls), sorted(acls)
    open_to_others = {
        path: acl
        for path, acl in acls.items()
        if OUR_LOGIN not in [e.id for e in acl] or not all(ours(e) for e in acl)
    }
    assert not open_to_others, open_to_others


async def _election_handshake(host: str, port: int, context: ssl.SSLContext) -> str:
    """How a TLS session with a node's election port goes: "ok" if it stays open, waiting for
    a peer's header, else the name of what ended it."""
    try:
        async with asyncio.timeout(5.0):
            reader, writer = await asyncio.open_connection(
                host, port, ssl=context, server_hostname=host
            )
    except (OSError, ssl.SSLError, TimeoutError) as err:
        return type(err).__name__
    try:
        # In TLS 1.3 a server refuses the client's certificate after the client's side of the
        # handshake ended: the alert comes with the first read. A peer that sends nothing is
        # dropped after the node's quorum socket timeout (tickTime x syncLimit): wait less.
        async with asyncio.timeout(QUIET_PEER_WAIT_S):
            return "closed" if await reader.read(1) == b"" else "answered"
    except TimeoutError:
        return "ok"
    except (OSError, ssl.SSLError) as err:
        return type(err).__name__
    finally:
        writer.close()


async def test_the_quorum_links_between_nodes_are_tls_with_the_deployments_certificates(
    cluster: Cluster, tmp_path: Path
) -> None:
    """ZooKeeper's nodes replicate znodes and vote over TLS (sslQuorum): each node's election
    port completes a handshake only with a host certificate of the deployment's CA, and serves
    one of its own."""
    now = datetime.datetime.now(datetime.UTC)
    other = pki.Authority.make("another deployment", now)
    for node in cluster.topology.zookeeper:
        host = node.client.host
        ours_context = pki.mutual_context(
            SECURITY.ca_cert, SECURITY.host_cert(host), SECURITY.host_key(host)
        )
        assert await _election_handshake(host, node.election_port, ours_context) == "ok"
        cert, key = other.issue(host, now)
        pki.write_host(tmp_path / "o.pem", tmp_path / "o.key", cert, key)
        foreign = pki.mutual_context(SECURITY.ca_cert, tmp_path / "o.pem", tmp_path / "o.key")
        nameless = pki.client_context(SECURITY.ca_cert)
        for refused in (foreign, nameless):
            outcome = await _election_handshake(host, node.election_port, refused)
            assert outcome != "ok", f"{node.name}'s election port took a peer not of ours"
