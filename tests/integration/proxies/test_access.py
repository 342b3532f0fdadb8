"""Who may do what, on every route of both proxies (docs/security.md): a request without a
valid token is answered 401, one whose token's scope lacks the route's rule 403, one in scope
is served; a revoked token stops working on every proxy within seconds."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from core.security.files import init_security
from core.security.pki import client_context
from core.security.settings import SecuritySettings
from core.security.tokens import (
    Scope,
    issue,
    load_public_key,
    load_signing_key,
    new_signing_key,
    verify,
)
from localcluster.controller import Cluster
from region import read_proxy, write_proxy
from region.security.gate import Rule
from region.security.service import TOKEN_ROUTES
from tests.support.cli import run_globelog
from tests.support.proxies import read_proxy as read_proxy_in
from tests.support.proxies import write_proxy as write_proxy_in
from tests.support.security import SECURITY, auth_headers, client_session
from tests.support.streams import fresh_namespace

OPS = ("read", "append", "create", "delete", "truncate", "admin", "observe")
REVOCATION_BOUND_S = 5.0
VALUES = {"{ns}": "acl", "{stream}": "s1", "{producer}": "1", "{token_id}": "nope"}


def signing_key() -> Any:
    return load_signing_key(SECURITY.signing_key.read_bytes(), "test key")


def token(
    ops: list[str], namespaces: list[str] | None = None, streams: list[str] | None = None
) -> str:
    scope = Scope.parse(
        {"namespaces": namespaces or ["*"], "streams": streams or ["*"], "ops": ops}
    )
    return issue(signing_key(), "tester", scope, time.time(), 600)[0]


def concrete(path: str, **values: str) -> str:
    for name, value in {**VALUES, **{f"{{{k}}}": v for k, v in values.items()}}.items():
        path = path.replace(name, value)
    return path


async def status(http: aiohttp.ClientSession, method: str, url: str, raw: str | None) -> int:
    headers = {} if raw is None else {"Authorization": f"Bearer {raw}"}
    # wait_ms=0: a read is answered at once; a tail is closed as soon as it answers
    async with http.request(
        method, url, headers=headers, params={"wait_ms": "0"}, allow_redirects=False
    ) as answer:
        return answer.status


def routes() -> list[tuple[str, str, str, Rule]]:
    found = [("write", m, p, r) for (m, p), r in {**write_proxy.RULES, **TOKEN_ROUTES}.items()]
    return found + [("read", m, p, r) for (m, p), r in read_proxy.RULES.items()]


async def test_every_route_demands_a_token_and_its_rule(cluster: Cluster) -> None:
    expired = issue(signing_key(), "tester", Scope.everything(), time.time() - 3600, 60)[0]
    foreign = issue(new_signing_key(), "tester", Scope.everything(), time.time(), 600)[0]
    admin = auth_headers()["Authorization"].removeprefix("Bearer ")
    async with (
        write_proxy_in(cluster, "us-east") as writer,
        read_proxy_in(cluster, "us-east") as reader,
        client_session({}, timeout=aiohttp.ClientTimeout(total=30)) as http,
    ):
        base = {"write": writer.config.me.url, "read": reader.me.url}
        checked = 0
        for kind, method, path, rule in routes():
            url = base[kind] + concrete(path)
            for refused in (None, "not-a-token", expired, foreign, admin[:-4] + "AAAA"):
                assert await status(http, method, url, refused) == 401, (method, path, refused)
            others = [op for op in OPS if op != rule.op]
            assert await status(http, method, url, token(others)) == 403, (method, path)
            if rule.on != "proxy":  # the op, on another namespace / stream: refused
                assert await status(http, method, url, token([rule.op], ["other"])) == 403
            if rule.on == "stream":
                assert await status(http, method, url, token([rule.op], ["acl"], ["x*"])) == 403
            served = await status(http, method, url, token([rule.op], ["acl"], ["s1"]))
            assert served not in (401, 403), (method, path, served)
            checked += 1
        assert checked == len(routes()) >= 20


async def test_a_prefix_scope_reaches_its_prefix_and_nothing_else(cluster: Cluster) -> None:
    namespace = fresh_namespace()
    team = token(["create", "read", "append"], [namespace], ["team-a.*"])
    async with (
        write_proxy_in(cluster, "us-east") as writer,
        client_session({"Authorization": f"Bearer {team}"}) as http,
    ):
        streams = f"{writer.config.me.url}/v1/namespaces/{namespace}/streams"
        for name, allowed in (("team-a.x", True), ("team-a.y", True), ("team-b.x", False)):
            async with http.put(f"{streams}/{name}") as answer:
                assert answer.status == (201 if allowed else 403), name
        async with http.put(f"{streams}/team-a", headers=auth_headers()) as answer:
            assert answer.status == 201  # the admin makes one outside the prefix
        async with http.get(streams) as answer:
            listed = (await answer.json())["streams"]
        assert sorted(listed) == ["team-a.x", "team-a.y"], "a listing shows only what it may read"


async def test_tokens_issue_only_within_their_scope_and_a_revoked_one_stops_everywhere(
    services: Cluster,
) -> None:
    topology = services.topology
    writes = [
        f"https://{p.endpoint.host}:{p.endpoint.port}"
        for region in topology.regions
        for p in region.write_proxies
    ]
    reads = [
        f"https://{p.endpoint.host}:{p.endpoint.port}"
        for region in topology.regions
        for p in region.read_proxies
    ]
    namespace = fresh_namespace()
    async with client_session() as admin:
        async with admin.post(
            f"{writes[0]}/v1/tokens",
            json={
                "subject": "team-lead",
                "scope": {"namespaces": [namespace], "streams": ["*"], "ops": ["admin", "read"]},
                "ttl_s": 600,
            },
        ) as answer:
            assert answer.status == 201, await answer.text()
            lead = (await answer.json())["token"]
        async with admin.put(f"{writes[0]}/v1/namespaces/{namespace}/streams/s") as answer:
            assert answer.status == 201
    lead_headers = {"Authorization": f"Bearer {lead}"}
    async with client_session(lead_headers) as http:
        wider = {"subject": "x", "scope": {"namespaces": ["*"], "ops": ["read"]}, "ttl_s": 60}
        async with http.post(f"{writes[1]}/v1/tokens", json=wider) as answer:
            assert (
                answer.status == 403 and "only within its scope" in (await answer.json())["message"]
            )
        narrow = {
            "subject": "reader",
            "scope": {"namespaces": [namespace], "streams": ["s"], "ops": ["read"]},
        }
        async with http.post(f"{writes[1]}/v1/tokens", json=narrow) as answer:
            assert answer.status == 201
            issued = await answer.json()
        assert issued["exp"] <= time.time() + 600 + 1, "no later than its issuer"
        async with http.get(f"{writes[2]}/v1/tokens") as answer:
            listed = [t["id"] for t in (await answer.json())["tokens"]]
        assert issued["id"] in listed
    reader = {"Authorization": f"Bearer {issued['token']}"}
    targets = [f"{url}/v1/namespaces/{namespace}/streams/s/records" for url in reads]
    async with client_session(reader) as http:
        for url in targets:
            async with http.get(url, params={"wait_ms": "0"}) as answer:
                assert answer.status == 200, await answer.text()
        async with (
            client_session(lead_headers) as lead_http,
            lead_http.delete(f"{writes[0]}/v1/tokens/{issued['id']}") as answer,
        ):
            assert answer.status == 200 and (await answer.json())["revoked"]
        revoked_at = time.monotonic()
        pending = set(targets) | {f"{url}/v1/namespaces/{namespace}/streams/s" for url in writes}
        while pending:
            assert time.monotonic() - revoked_at < REVOCATION_BOUND_S, f"still served: {pending}"
            for url in sorted(pending):
                async with http.get(url, params={"wait_ms": "0"}) as answer:
                    if answer.status == 401:
                        assert "revoked" in (await answer.json())["message"]
                        pending.discard(url)
            await asyncio.sleep(0.05)
    print(
        f"revoked token refused by all {len(targets) + len(writes)} proxies after "
        f"{time.monotonic() - revoked_at:.2f} s"
    )


async def test_the_first_admin_token_is_on_record(services: Cluster) -> None:
    """`security init` makes it before ZooKeeper runs; the cluster's metadata initialisation
    puts it on record, so it is listed and could be revoked by id like any other."""
    public = load_public_key(SECURITY.public_key.read_bytes(), "test public key")
    admin = verify(SECURITY.admin_token.read_text().strip(), public, time.time())
    proxy = services.topology.regions[0].write_proxies[0].endpoint
    async with (
        client_session() as http,
        http.get(f"https://{proxy.host}:{proxy.port}/v1/tokens") as answer,
    ):
        assert answer.status == 200
        listed = {t["id"]: t for t in (await answer.json())["tokens"]}
    assert admin.token_id in listed, "the admin token is not on record"
    record = listed[admin.token_id]
    assert record["issued_by"] == "security init" and record["sub"] == admin.subject
    assert not record["revoked"]


async def test_revoking_a_token_revokes_every_token_it_issued(services: Cluster) -> None:
    """A leaked delegating token is revoked once: what it issued, and what those issued, stop
    with it on every proxy."""
    topology = services.topology
    base = "https://{0.host}:{0.port}/v1/namespaces/{1}/streams/s"
    namespace = fresh_namespace()
    targets = [  # describe on the write proxies, read on the read proxies
        base.format(p.endpoint, namespace) + suffix
        for region in topology.regions
        for proxies, suffix in ((region.write_proxies, ""), (region.read_proxies, "/records"))
        for p in proxies
    ]
    write_url = targets[0].split("/v1/")[0]
    scope = {"namespaces": [namespace], "streams": ["*"], "ops": ["admin", "read"]}

    async def issued_by(http: aiohttp.ClientSession, subject: str) -> dict[str, Any]:
        body = {"subject": subject, "scope": scope, "ttl_s": 600}
        async with http.post(f"{write_url}/v1/tokens", json=body) as answer:
            assert answer.status == 201, await answer.text()
            return dict(await answer.json())

    async with client_session() as admin:
        async with admin.put(f"{write_url}/v1/namespaces/{namespace}/streams/s") as answer:
            assert answer.status == 201
        lead = await issued_by(admin, "team-lead")
    async with client_session({"Authorization": f"Bearer {lead['token']}"}) as http:
        deputy = await issued_by(http, "deputy")
    async with client_session({"Authorization": f"Bearer {deputy['token']}"}) as http:
        app = await issued_by(http, "app")
    async with client_session({"Authorization": f"Bearer {app['token']}"}) as http:
        for url in targets:
            async with http.get(url, params={"wait_ms": "0"}) as answer:
                assert answer.status == 200, await answer.text()
        async with (
            client_session() as admin,
            admin.delete(f"{write_url}/v1/tokens/{lead['id']}") as answer,
        ):
            assert answer.status == 200
        revoked_at, pending = time.monotonic(), set(targets)
        while pending:
            assert time.monotonic() - revoked_at < REVOCATION_BOUND_S, f"still served: {pending}"
            for url in sorted(pending):
                async with http.get(url, params={"wait_ms": "0"}) as answer:
                    if answer.status == 401:
                        message = (await answer.json())["message"]
                        assert f"token {lead['id']}, which issued it" in message, message
                        pending.discard(url)
            await asyncio.sleep(0.05)


def test_the_cli_issues_lists_and_revokes_and_says_why_it_is_refused(
    services: Cluster, tmp_path: Path
) -> None:
    topology = str(services.topology_path)
    namespace = fresh_namespace()
    made = run_globelog(
        "token", "issue", "--topology", topology, "--subject", "app-1",
        "--namespaces", namespace, "--ops", "read,append,create", "--ttl", "10m",
        timeout_s=60,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    issued = json.loads(made.stdout)
    assert issued["sub"] == "app-1" and issued["scope"]["namespaces"] == [namespace]
    listed = run_globelog("token", "list", "--topology", topology, timeout_s=60)
    assert issued["id"] in listed.stdout
    token_file = tmp_path / "app.token"
    token_file.write_text(issued["token"])
    as_app = ("--token-file", str(token_file))
    created = run_globelog(
        *as_app, "stream", "create", "s", "--namespace", namespace, "--topology", topology,
        "--region", "us-east", timeout_s=60,
    )  # fmt: skip
    assert created.returncode == 0, created.stderr
    elsewhere = run_globelog(
        *as_app, "stream", "create", "s", "--namespace", "not-" + namespace,
        "--topology", topology, "--region", "us-east", timeout_s=60,
    )  # fmt: skip
    assert elsewhere.returncode == 1 and "forbidden" in elsewhere.stderr
    assert f"may not create stream not-{namespace}/s" in elsewhere.stderr
    revoked = run_globelog("token", "revoke", issued["id"], "--topology", topology, timeout_s=60)
    assert revoked.returncode == 0 and json.loads(revoked.stdout)["revoked"]
    time.sleep(REVOCATION_BOUND_S)
    refused = run_globelog(
        *as_app, "stream", "list", "--namespace", namespace, "--topology", topology,
        "--region", "us-east", timeout_s=60,
    )  # fmt: skip
    assert refused.returncode == 1 and "unauthenticated" in refused.stderr
    assert "revoked" in refused.stderr


async def test_the_proxies_speak_tls_only_and_only_to_clients_that_trust_the_ca(
    cluster: Cluster, tmp_path: Path
) -> None:
    other = SecuritySettings(tmp_path / "other")
    init_security(other, time.time(), ["127.0.0.1"], "another deployment")
    async with (
        write_proxy_in(cluster, "us-east") as writer,
        read_proxy_in(cluster, "us-east") as reader,
    ):
        for url in (writer.config.me.url, reader.me.url):
            assert url.startswith("https://")
            plain = "http://" + url.removeprefix("https://")
            async with aiohttp.ClientSession() as http:
                with pytest.raises(aiohttp.ClientError):  # no HTTP answer on a TLS port
                    async with http.get(f"{plain}/v1/health", headers=auth_headers()) as answer:
                        await answer.read()
            foreign = aiohttp.TCPConnector(ssl=client_context(other.ca_cert))
            async with aiohttp.ClientSession(connector=foreign) as http:
                with pytest.raises(aiohttp.ClientConnectorCertificateError):
                    async with http.get(f"{url}/v1/health", headers=auth_headers()):
                        pass
            async with client_session() as http, http.get(f"{url}/v1/health") as answer:
                assert answer.status == 200


async def test_a_tail_ends_when_its_token_is_revoked(services: Cluster) -> None:
    topology = services.topology
    east = topology.region("us-east")
    write_url, read_url = (
        topology.proxy_url(east.write_proxies[0]),
        topology.proxy_url(east.read_proxies[0]),
    )
    namespace = fresh_namespace()
    async with client_session() as admin:
        async with admin.put(f"{write_url}/v1/namespaces/{namespace}/streams/s") as answer:
            assert answer.status == 201
        scope = {"namespaces": [namespace], "streams": ["s"], "ops": ["read"]}
        async with admin.post(
            f"{write_url}/v1/tokens", json={"subject": "tailer", "scope": scope, "ttl_s": 600}
        ) as answer:
            issued = await answer.json()
        tailer = {"Authorization": f"Bearer {issued['token']}"}
        async with (
            client_session(tailer) as http,
            http.get(f"{read_url}/v1/namespaces/{namespace}/streams/s/tail") as tail,
        ):
            assert tail.status == 200
            async with admin.post(
                f"{write_url}/v1/namespaces/{namespace}/streams/s/records", data=b"one"
            ) as answer:
                assert answer.status == 200
            first = json.loads(await asyncio.wait_for(tail.content.readline(), 10))
            assert first["seq"] == 0
            async with admin.delete(f"{write_url}/v1/tokens/{issued['id']}") as answer:
                assert answer.status == 200
            last = json.loads(await asyncio.wait_for(tail.content.readline(), REVOCATION_BOUND_S))
            assert last["code"] == "unauthenticated" and "revoked" in last["message"]
            assert await asyncio.wait_for(tail.content.read(), 5) == b"", "then it ends"
