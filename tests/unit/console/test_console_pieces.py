"""The console's pieces without a cluster: positions typed by a user, its route rules, the
access middleware (sign-in redirect, 401/403, the change header, the audit log), escaping of
what it shows, and failover run names."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from console import access, health, pages, records
from console import streams as streams_module
from console.access import CHANGE_HEADER, COOKIE, PUBLIC, AuditLog, ConsoleAccess, Need
from console.records import ProxyAnswerError, ProxyRelay, position_query
from console.runs import FailoverRuns
from console.server import RULES, Console, ConsoleSettings
from core.errors import BadRequestError, ConfigError, NotFoundError, OverCapacityError
from core.security.tokens import Scope, issue, new_signing_key
from core.segments import SegmentMetadata, SegmentState, encode_segment
from global_meta.store import NodeStat
from global_meta.streams import ROOT, StreamMetaStore
from placement import load_checked_topology
from region.http_errors import error_middleware
from region.security.gate import Gate
from region.security.service import ProxySecurity

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(
    ("typed", "query"),
    [
        ("", {"from": "earliest"}),
        ("earliest", {"from": "earliest"}),
        ("42", {"from_seq": "42"}),
        ("seq:7", {"from_seq": "7"}),
        ("txid:100", {"from": "txid:100"}),
        ("dlsn:3.1.0", {"from": "dlsn:3.1.0"}),
        ("3.1.0", {"from": "dlsn:3.1.0"}),
        ("time:1795777488074", {"from": "time:1795777488074"}),
    ],
)
def test_a_typed_position_becomes_the_read_proxys_query(typed: str, query: dict[str, str]) -> None:
    assert position_query(typed) == query


@pytest.mark.parametrize("typed", ["-1", "seq:x", "yesterday", "1.2", "txid:"])
def test_a_position_that_is_none_of_them_is_refused_saying_what_is_expected(typed: str) -> None:
    with pytest.raises(BadRequestError, match="expected a sequence id") as refused:
        position_query(typed)
    assert repr(typed)[:20] in str(refused.value)


def test_every_route_of_the_console_has_a_rule_and_every_change_is_marked() -> None:
    topology = load_checked_topology(REPO / "topology.yaml")
    security = ProxySecurity(None, None, None, None, None, topology.limits)  # type: ignore[arg-type]
    console = Console(
        topology,
        ConsoleSettings("c", "us-east"),
        None,
        security,
        Path("/nonexistent"),
        None,  # type: ignore[arg-type]
    )
    app = console.app()  # ConfigError if a route had no rule
    methods = {route.method for route in app.router.routes()}
    assert {"GET", "POST", "DELETE"} <= methods
    for (method, path), need in RULES.items():
        if need is PUBLIC:
            assert path in ("/signin", "/signout", "/static/{name}"), path
        elif method in ("POST", "DELETE"):
            assert need.change, (method, path)
        else:
            assert not need.change, (method, path)


def test_a_route_without_a_rule_stops_the_console() -> None:
    app = web.Application()

    async def new(_: web.Request) -> web.Response:
        return web.Response()

    app.router.add_get("/new", new)
    with pytest.raises(ConfigError, match=r"routes without a rule \[\('GET', '/new'\)\]"):
        access.check_rules(app, {("GET", "/"): Need("observe")})


def _token(key: Any, ops: list[str], namespaces: list[str] | None = None) -> str:
    scope = Scope.parse({"namespaces": namespaces or ["*"], "streams": ["*"], "ops": ops})
    return issue(key, "someone", scope, time.time(), 600)[0]


async def _client(tmp_path: Path) -> tuple[TestClient[Any, Any], Any, ConsoleAccess]:
    key = new_signing_key()
    gate = Gate(key.public_key(), frozenset)
    guard = ConsoleAccess(gate, tmp_path / "audit.jsonl", secure_cookie=False)
    rules = {
        ("GET", "/"): Need("observe"),
        ("GET", "/api/x"): Need("observe"),
        ("POST", "/api/streams/{ns}/{stream}/truncate"): Need("truncate", "stream", change=True),
        ("GET", "/signin"): PUBLIC,
        ("POST", "/api/bookies/{bookie}/decommission"): Need("admin", "cluster", change=True),
        ("DELETE", "/api/streams/{ns}/{stream}"): Need("delete", "stream", change=True),
    }

    async def ok(_: web.Request) -> web.Response:
        return web.json_response({"done": True})

    async def refused_by_proxy(_: web.Request) -> web.Response:
        raise ProxyAnswerError(404, b'{"code": "stream_not_found"}')

    app = web.Application(middlewares=[error_middleware, guard.middleware(rules)])
    app.router.add_get("/", ok)
    app.router.add_get("/api/x", ok)
    app.router.add_post("/api/streams/{ns}/{stream}/truncate", ok)
    app.router.add_get("/signin", ok)
    app.router.add_post("/api/bookies/{bookie}/decommission", ok)
    app.router.add_delete("/api/streams/{ns}/{stream}", refused_by_proxy)
    client: TestClient[Any, Any] = TestClient(TestServer(app, host="127.0.0.1"))
    await client.start_server()
    return client, key, guard


async def test_without_a_token_a_page_sends_to_sign_in_and_the_api_answers_401(
    tmp_path: Path,
) -> None:
    client, key, _ = await _client(tmp_path)
    async with client:
        page = await client.get("/", allow_redirects=False)
        assert (page.status, page.headers["Location"]) == (303, "/signin")
        api = await client.get("/api/x")
        assert api.status == 401
        assert (await api.json())["code"] == "unauthenticated"
        assert (await client.get("/signin")).status == 200
        other_key = _token(new_signing_key(), ["observe"])
        assert (
            await client.get("/api/x", headers={"Authorization": f"Bearer {other_key}"})
        ).status == 401
        client.session.cookie_jar.update_cookies({COOKIE: _token(key, ["observe"])})
        assert (await client.get("/api/x")).status == 200


async def test_a_change_needs_admin_the_changes_own_op_and_the_consoles_header_and_is_audited(
    tmp_path: Path,
) -> None:
    client, key, guard = await _client(tmp_path)
    url = "/api/streams/ns1/s/truncate"
    async with client:
        admin_only = {"Authorization": f"Bearer {_token(key, ['admin'])}"}
        both = {"Authorization": f"Bearer {_token(key, ['admin', 'truncate'])}"}
        truncate_only = {"Authorization": f"Bearer {_token(key, ['truncate'])}"}
        elsewhere = {"Authorization": f"Bearer {_token(key, ['admin', 'truncate'], ['ns2'])}"}
        assert (await client.post(url, headers=both)).status == 403  # no console header
        for refused in (admin_only, truncate_only, elsewhere):
            answer = await client.post(url, headers={**refused, CHANGE_HEADER: "1"})
            assert answer.status == 403
        answer = await client.post(url, headers={**both, CHANGE_HEADER: "1"})
        assert answer.status == 200
    entries = guard.audit.newest()
    assert [e["outcome"] for e in entries] == [
        "ok",
        "forbidden",
        "forbidden",
        "forbidden",
        "forbidden",
    ]
    assert entries[0]["target"] == {"ns": "ns1", "stream": "s"}
    assert entries[0]["action"] == "POST /api/streams/{ns}/{stream}/truncate"
    assert "X-Globelog-Console" in entries[-1]["detail"]


def test_the_audit_log_rotates_past_its_bound_and_shows_the_newest_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(access, "AUDIT_BYTES_MAX", 300)
    log = AuditLog(tmp_path / "audit.jsonl")
    for i in range(20):
        log.write({"action": f"a{i}"})
    assert (tmp_path / "audit.jsonl.1").exists()
    assert (tmp_path / "audit.jsonl").stat().st_size < 600
    newest = log.newest(3)
    assert [e["action"] for e in newest] == ["a19", "a18", "a17"]
    with (tmp_path / "audit.jsonl").open("a") as file:
        file.write("not json\n")
    assert log.newest(1) == [{"unparsed": "not json"}]


def test_what_the_console_shows_is_escaped() -> None:
    key = new_signing_key()
    token = issue(key, "me", Scope.everything(), time.time(), 600)[1]
    listing = {
        "namespace": "ns",
        "filter": '"><script>',
        "matching": 1,
        "shown": 1,
        "streams": [
            {
                "stream": "<script>alert(1)</script>",
                "records_completed": 1,
                "in_progress": 0,
                "bytes_completed": 10,
                "segments": 1,
                "owner": "<i>x</i>",
                "writes_per_s": None,
            }
        ],
    }
    html = pages.streams(["ns"], listing, token)
    assert "<script>alert" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<i>x</i>" not in html
    assert '"><script>' not in html


def _stream_view() -> dict[str, Any]:
    segment = {
        "sequence": 1, "state": "completed", "ledger_id": 5, "first_seq": 0, "record_count": 3,
        "created_ms": 1000, "completed_ms": 2000, "writer_region": "us-east",
        "ledger": {
            "ledger_id": 5, "state": "CLOSED", "quorum": "4/4/3", "min_regions_for_durability": 2,
            "length": 30, "ensembles": [{
                "first_entry_id": 0, "adherence": "fail", "audit": "one region only",
                "bookies": [{"bookie": "b1", "name": "bk1", "region": "us-east", "rack": "a"}],
            }],
        },
    }  # fmt: skip
    return {
        "namespace": "ns", "stream": "s", "owner": None, "records_completed": 3,
        "segments_total": 1, "rows": [segment], "regions": ["us-east", "eu-west"],
    }  # fmt: skip


def test_a_read_only_token_gets_no_change_control_and_an_admin_does() -> None:
    key = new_signing_key()
    reader = issue(
        key, "r", Scope.parse({"namespaces": ["*"], "streams": ["*"], "ops": ["read"]}),
        time.time(), 600,
    )[1]  # fmt: skip
    admin = issue(key, "a", Scope.everything(), time.time(), 600)[1]
    shown = pages.stream(_stream_view(), reader, False, 0, 100)
    assert 'id="actions"' not in shown and "data-action" not in shown
    assert 'class="ens fail"' in shown and "one region only" in shown
    assert 'id="actions"' in pages.stream(_stream_view(), admin, False, 0, 100)
    hidden = pages.stream(_stream_view(), admin, True, 0, 100)
    assert 'id="contains"' not in hidden and "search is off" in hidden


def test_a_failover_run_is_found_by_its_name_only(tmp_path: Path) -> None:
    run = tmp_path / "run-7"
    run.mkdir()
    (run / "report.json").write_text(json.dumps({"valid": True, "operations": {"send": 3}}))
    (tmp_path / "secret").mkdir()
    runs = FailoverRuns(tmp_path)
    assert [r["name"] for r in runs.listing()] == ["run-7"]
    assert runs.run("run-7")["valid"] is True
    for name in ("../run-7", "secret", "run-7/../../etc", ""):
        with pytest.raises(NotFoundError):
            runs.run(name)
    with pytest.raises(NotFoundError, match=r"no timeline\.png"):
        runs.timeline("run-7")
    assert FailoverRuns(None).listing() == []


async def test_a_deployment_wide_change_needs_every_namespace_and_names_are_checked(
    tmp_path: Path,
) -> None:
    client, key, guard = await _client(tmp_path)
    change = {CHANGE_HEADER: "1"}
    async with client:
        team = {"Authorization": f"Bearer {_token(key, ['admin'], ['team-a*'])}", **change}
        answer = await client.post("/api/bookies/bk1/decommission", headers=team)
        assert answer.status == 403
        assert "whole deployment" in (await answer.json())["message"]
        everyone = {"Authorization": f"Bearer {_token(key, ['admin'])}", **change}
        assert (await client.post("/api/bookies/bk1/decommission", headers=everyone)).status == 200
        # a name the proxies would refuse never reaches a path (%2F decodes to "/")
        both = {"Authorization": f"Bearer {_token(key, ['admin', 'truncate'], ['team-a*'])}"}
        bad = await client.post(
            "/api/streams/team-a~payments%2Fx/orders/truncate", headers={**both, **change}
        )
        assert bad.status == 400
        assert (await bad.json())["code"] == "invalid_stream_name"
        # a change the proxy refused is audited with the proxy's status
        deleter = {"Authorization": f"Bearer {_token(key, ['admin', 'delete'])}", **change}
        assert (await client.delete("/api/streams/ns1/s", headers=deleter)).status == 500
    outcomes = [e["outcome"] for e in guard.audit.newest()]
    assert outcomes[0] == "proxy 404" and "ok" in outcomes and "forbidden" in outcomes


async def test_live_tails_past_their_cap_are_refused_and_a_refusal_frees_no_slot() -> None:
    relay = ProxyRelay("https://127.0.0.1:1", "https://127.0.0.1:1", False)
    relay._tails = records.TAILS_MAX
    with pytest.raises(OverCapacityError, match=f"{records.TAILS_MAX} live tails"):
        async with relay.tail(None, "ns", "s", 0):
            pass
    assert relay._tails == records.TAILS_MAX


class _Segments:
    """A metadata store holding streams of segments: what StreamViews reads."""

    def __init__(self, streams: dict[str, int]) -> None:
        self.reads = 0
        self.nodes: dict[str, bytes] = {}
        for stream, count in streams.items():
            for seq in range(1, count + 1):
                segment = SegmentMetadata(seq, seq, SegmentState.COMPLETED, 0, 0, 1000, "us-east")
                path = f"{ROOT}/ns/streams/{stream}/segments/{seq:018d}"
                self.nodes[path] = encode_segment(segment)

    async def children(self, path: str) -> list[str]:
        return sorted(p.rsplit("/", 1)[1] for p in self.nodes if p.rsplit("/", 1)[0] == path)

    async def get_many(self, paths: list[str]) -> list[tuple[bytes, NodeStat] | None]:
        self.reads += len(paths)
        return [(self.nodes[p], NodeStat(0, 0, 0, 0, 0, 0, 0)) for p in paths]


async def test_the_segment_cache_keeps_at_most_its_bound_and_reads_again_once_aged(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(streams_module, "SEGMENTS_CACHED_MAX", 10)
    store = _Segments({"a": 4, "b": 4, "c": 4, "big": 11})
    now = [0.0]
    views = streams_module.StreamViews(store, 2, monotonic=lambda: now[0])  # type: ignore[arg-type]
    meta = StreamMetaStore(store, "ns")  # type: ignore[arg-type]
    for name in ("a", "b", "c", "big"):
        found, total = await views._segments(meta, name)
        assert len(found) == total
        assert views._segments_cached <= 10
    assert ("ns", "big") not in views._segment_cache  # larger than the whole cache: not kept
    assert ("ns", "a") not in views._segment_cache  # the least recently shown went first
    reads = store.reads
    await views._segments(meta, "c")
    assert store.reads == reads  # fresh: from the cache
    now[0] += streams_module.FRESH_S + 1
    await views._segments(meta, "c")
    assert store.reads == reads + 4  # aged: read again


async def test_the_overviews_probes_ask_zookeeper_modes_again_after_they_are_kept_or_suspect(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`srvr` closes its connection, so each ask is a fresh handshake: the console's probes
    keep the modes ZOOKEEPER_MODES_KEPT_S, except a node of a region where another node
    stopped answering, asked again after ZOOKEEPER_MODE_FRESH_S."""
    topology = load_checked_topology(REPO / "topology.yaml")
    # in clear: a unit test reads no deployment's certificates
    topology = dataclasses.replace(
        topology, security=dataclasses.replace(topology.security, tls=False)
    )
    nodes = len(topology.zookeeper)
    asked: list[str] = []

    async def mode(endpoint: Any, tls: Any) -> str:
        asked.append(endpoint.address)
        return "follower"

    monkeypatch.setattr(health, "zookeeper_mode", mode)
    now = [100.0]
    probes = health.NodeProbes(topology, clock=lambda: now[0])
    try:
        assert await probes.zookeeper_modes() == ["follower"] * nodes
        assert len(asked) == nodes
        now[0] += health.ZOOKEEPER_MODE_FRESH_S
        await probes.zookeeper_modes()
        assert len(asked) == nodes  # kept
        await probes.zookeeper_modes(suspect_regions={"us-west"})
        west = next(n for n in topology.zookeeper if n.region == "us-west")
        assert asked[nodes:] == [west.client.address]
        now[0] += health.ZOOKEEPER_MODES_KEPT_S - health.ZOOKEEPER_MODE_FRESH_S
        await probes.zookeeper_modes()
        assert len(asked) == 1 + 2 * nodes - 1  # all but us-west's, asked later
    finally:
        await probes.close()
