"""Region changes without a cluster: the merged and trimmed topology files, the safety
checker's findings, and the published topology's new fields."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import yaml

from core.errors import ConfigError, TopologyError
from core.routes import decode_published, encode_published, publish_topology
from core.topology import Replication
from core.topology_loader import parse_topology, zookeeper_warning
from membership.changes import ChangeRecord
from membership.plans import plan_add, plan_join, plan_remove, write_topology
from membership.safety import Facts, LedgerView, decommission_findings, removal_findings

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = (REPO / "deploy" / "topology.example.yaml").read_text()
REGION = """
region:
  name: ap-south
  racks:
    - {name: rack-a, bookies: [{name: bk-ap-a, host: bk-a.ap-south.example.com, port: 3181}]}
    - {name: rack-b, bookies: [{name: bk-ap-b, host: bk-b.ap-south.example.com, port: 3181}]}
  write_proxies: [{name: wp-ap-south, host: proxy.ap-south.example.com, port: 8080}]
  read_proxies: [{name: rp-ap-south, host: proxy.ap-south.example.com, port: 8081}]
zookeeper:
  - {name: zk-ap-south, region: ap-south, host: zk.ap-south.example.com, client_port: 2181,
     peer_port: 2888, election_port: 3888}
"""


def test_a_region_file_is_merged_and_checked_as_the_topology_is() -> None:
    plan = plan_add(EXAMPLE, REGION, "ap.yaml")
    assert plan.region == "ap-south"
    assert plan.after.region_names == ("us-east", "us-west", "eu-west", "ap-south")
    assert [n.server_id for n in plan.after.zookeeper] == [1, 2, 3, 4]
    # the written file parses to the same topology, every node's id named
    again = parse_topology(plan.text, "merged")
    assert again == plan.after
    assert [z["id"] for z in yaml.safe_load(plan.text)["zookeeper"]] == [1, 2, 3, 4]
    assert zookeeper_warning(plan.after) is not None  # four nodes: even, said


def test_a_bad_region_file_says_what_is_wrong() -> None:
    with pytest.raises(ConfigError, match="already in the topology"):
        plan_add(EXAMPLE, REGION.replace("ap-south", "us-east", 1), "ap.yaml")
    with pytest.raises(ConfigError, match=r"unknown key\(s\) \['wan'\]"):
        plan_add(EXAMPLE, REGION + "wan: {}\n", "ap.yaml")
    # a bookie on a port another region's host has is fine; a duplicate name is not
    duplicate = REGION.replace("bk-ap-a", "bk-us-east-a")
    with pytest.raises(TopologyError, match="bk-us-east-a"):
        plan_add(EXAMPLE, duplicate, "ap.yaml")
    # replication the new region count cannot keep is refused with the loader's words
    strict = (
        REGION
        + "replication: {ensemble_size: 4, write_quorum: 4, ack_quorum: 3,\n"
        + ("  min_regions_for_durability: 5}\n")
    )
    with pytest.raises(TopologyError, match="min_regions_for_durability"):
        plan_add(EXAMPLE, strict, "ap.yaml")


def test_removing_a_region_keeps_every_other_nodes_server_id() -> None:
    plan = plan_remove(EXAMPLE, "us-west")
    assert plan.after.region_names == ("us-east", "eu-west")
    assert [(n.name, n.server_id) for n in plan.after.zookeeper] == [
        ("zk-us-east", 1),
        ("zk-eu-west", 3),
    ]
    with pytest.raises(ConfigError, match="not in the topology"):
        plan_remove(EXAMPLE, "mars")


def test_a_region_the_file_already_lists_is_planned_as_a_join() -> None:
    merged = plan_add(EXAMPLE, REGION, "ap.yaml").text
    plan = plan_join(merged, "ap-south")
    assert plan.before.region_names == ("us-east", "us-west", "eu-west")
    assert plan.after.region_names[-1] == "ap-south"


def test_the_topology_file_is_replaced_whole_and_the_old_one_kept(tmp_path: Path) -> None:
    path = tmp_path / "topology.yaml"
    path.write_text(EXAMPLE)
    path.chmod(0o640)
    kept = write_topology(path, plan_remove(EXAMPLE, "eu-west").text, "# header\n", "remove-x")
    assert kept.name == "topology.yaml.before-remove-x" and kept.read_text() == EXAMPLE
    assert path.read_text().startswith("# header\n")
    assert path.stat().st_mode & 0o777 == 0o640
    # run again (a resumed change): the first original is the one kept
    write_topology(path, path.read_text(), "# again\n", "remove-x")
    assert kept.read_text() == EXAMPLE
    assert "eu-west" not in parse_topology(path.read_text(), "t").region_names


def _facts(**changes: object) -> Facts:
    topology = parse_topology(EXAMPLE, "t")
    published = publish_topology(topology)
    bookies = frozenset(b.bookie_id for b in topology.bookies)
    ids = sorted(bookies)
    values: dict[str, object] = {
        "published": published,
        "replication": topology.replication,
        "up": bookies,
        "writable": bookies,
        "ledgers": (LedgerView(7, (tuple(ids[:4]),), 4, 3, 2),),
        "zk_members": {1: "us-east", 2: "us-west", 3: "eu-west"},
        "zk_serving": frozenset({1, 2, 3}),
        "write_proxies": {"us-east": 1, "us-west": 1, "eu-west": 1},
    }
    values.update(changes)
    return Facts(**values)  # type: ignore[arg-type]


def test_a_removal_that_keeps_the_rule_is_safe() -> None:
    report = removal_findings(_facts(), "us-west")
    assert report.safe, report.lines()


def test_a_removal_that_leaves_too_few_regions_is_refused_saying_what_would_make_it_safe() -> None:
    strict = Replication(6, 6, 4, 3)
    report = removal_findings(_facts(replication=strict), "us-west")
    assert not report.safe
    assert any("cannot be kept over the 2 region(s) left" in r for r in report.refusals)
    assert any("Add a region first" in r for r in report.refusals)


def test_entries_with_no_copy_left_outside_the_region_refuse_the_removal() -> None:
    topology = parse_topology(EXAMPLE, "t")
    west = [b.bookie_id for b in topology.bookies if b.region == "us-west"]
    east = [b.bookie_id for b in topology.bookies if b.region == "us-east"]
    # the us-east copies of this ledger are on bookies that do not answer
    facts = _facts(
        ledgers=(LedgerView(9, ((*west, *east),), 4, 3, 2),),
        up=frozenset(b.bookie_id for b in topology.bookies) - set(east),
    )
    report = removal_findings(facts, "us-west")
    assert any("1 ledger(s) (first [9])" in r and "could be lost" in r for r in report.refusals)


def test_zookeeper_without_a_majority_after_the_removal_refuses_it() -> None:
    report = removal_findings(_facts(zk_serving=frozenset({1, 2})), "us-west")
    assert any(
        "after the removal has 2 voting node(s) of which 1 serve" in r for r in report.refusals
    )
    only_node = removal_findings(_facts(zk_members={2: "us-west"}), "us-west")
    assert any("every ZooKeeper node is in us-west" in r for r in only_node.refusals)


def test_a_removal_with_no_write_proxy_left_is_refused() -> None:
    report = removal_findings(_facts(write_proxies={"us-west": 1}), "us-west")
    assert any("no write proxy is registered" in r for r in report.refusals)


def test_the_published_topology_carries_replication_and_drains() -> None:
    topology = parse_topology(EXAMPLE, "t")
    published = publish_topology(topology).draining("us-west")
    again = decode_published(encode_published(published), "t")
    assert again == published
    assert again.replication == topology.replication and again.drained == ("us-west",)
    gone = again.without_region("us-west")
    assert "us-west" not in gone.regions and gone.drained == ()
    assert all(b.region != "us-west" for b in gone.bookies)
    assert "us-west" not in gone.addresses
    # a publication written before these fields existed reads as none of them
    old = encode_published(published).replace(b'"drained"', b'"ignored"')
    assert decode_published(old, "t").drained == ()


def test_a_change_record_round_trips_and_says_its_steps() -> None:
    record = ChangeRecord("remove", "us-west", {"checked": 1_700_000_000_000}, 1, None, True, 3)
    again = ChangeRecord.decode(record.encode(), 3, "t")
    assert again == record
    lines = record.describe()
    assert "under way" in lines[0] and "forced" in lines[0]
    assert lines[1].split()[:2] == ["done", "checked"]
    assert lines[2].split()[:3] == ["to", "do", "placement-stopped"]


def test_a_bookie_decommission_that_leaves_too_few_bookies_is_refused() -> None:
    topology = parse_topology(EXAMPLE, "t")
    bookie = topology.bookies[0].bookie_id
    fine = decommission_findings(_facts(), bookie)
    assert fine.safe, fine.lines()
    assert any("1 ledger(s) hold copies" in w for w in fine.warnings)
    # six copies over six bookies: without one, no new ledger can be placed anywhere
    strict = decommission_findings(_facts(replication=Replication(6, 6, 5, 3)), bookie)
    assert any(f"without {bookie}, a writer in us-east" in r for r in strict.refusals)
    unknown = decommission_findings(_facts(), "nowhere:1")
    assert unknown.refusals == ["bookie nowhere:1 is not in the published topology"]


def test_only_the_ack_quorum_of_an_entrys_copies_is_counted_on() -> None:
    """Of W copies only A are sure to hold an entry: with W=4, A=3 two copies must stay."""
    topology = parse_topology(EXAMPLE, "t")
    west = [b.bookie_id for b in topology.bookies if b.region == "us-west"]
    east = [b.bookie_id for b in topology.bookies if b.region == "us-east"]
    ensemble = (*west, *east)
    down = frozenset(b.bookie_id for b in topology.bookies) - {east[1]}
    risky = _facts(ledgers=(LedgerView(3, (ensemble,), 4, 3, 2),), up=down)
    assert any("could be lost" in r for r in removal_findings(risky, "us-west").refusals)
    every_copy_acked = _facts(ledgers=(LedgerView(3, (ensemble,), 4, 4, 2),), up=down)
    assert removal_findings(every_copy_acked, "us-west").safe


class _Store:
    """The two writes a change record needs, kept in a dict (versions counted)."""

    def __init__(self) -> None:
        self.saved: list[bytes] = []

    async def create(self, path: str, data: bytes, make_parents: bool = False) -> str:
        self.saved.append(data)
        return path

    async def set(self, path: str, data: bytes, *, version: int) -> object:
        self.saved.append(data)
        return type("Stat", (), {"version": version + 1})()


def _steps(ran: list[str], stop_at: str | None = None) -> dict[str, object]:
    def step(name: str) -> object:
        async def run() -> bool:
            ran.append(name)
            return name != stop_at

        return run

    return {name: step(name) for name in ("one", "two", "three")}


async def test_a_change_resumes_at_its_first_step_not_done_and_stops_where_asked() -> None:
    from membership.changes import DONE, STOPPED, Change, _run

    store, said = _Store(), []
    change = Change(store, None, Path("t"), None, said.append, 0.0, None)  # type: ignore[arg-type]
    record = ChangeRecord("remove", "r")
    ran: list[str] = []
    assert await _run(change, record, _steps(ran, stop_at="two"), None) == STOPPED  # type: ignore[arg-type]
    assert ran == ["one", "two"] and list(record.steps) == ["one"]
    ran.clear()
    # --until a step already done stops there without running anything
    assert await _run(change, record, _steps(ran), "one") == DONE  # type: ignore[arg-type]
    assert ran == [] and record.finished_ms is None
    assert await _run(change, record, _steps(ran), None) == DONE  # type: ignore[arg-type]
    assert ran == ["two", "three"]
    # the last step and the end of the change are one write
    last = ChangeRecord.decode(store.saved[-1], 0, "t")
    assert last.finished_ms == last.steps["three"]


def test_a_joining_region_is_published_over_what_runs_not_over_the_file() -> None:
    from membership.changes import with_region

    merged = plan_add(EXAMPLE, REGION, "ap.yaml").after
    running = publish_topology(plan_remove(EXAMPLE, "us-west").after).draining("eu-west")
    joined = with_region(running, publish_topology(merged), "ap-south")
    assert joined.regions == ("us-east", "eu-west", "ap-south")  # us-west stays gone
    assert joined.drained == ("eu-west",)  # a removal under way stays under way
    assert {b.region for b in joined.bookies} == {"us-east", "eu-west", "ap-south"}
    assert set(joined.addresses) == {"us-east", "eu-west", "ap-south"}
    assert "bk-a.ap-south.example.com:3181" in joined.addresses["us-east"]


class _Records(_Store):
    """One change record at a path, as read_record reads it."""

    def __init__(self, record: ChangeRecord | None) -> None:
        super().__init__()
        self.record = record

    async def sync(self, path: str) -> None:
        return None

    async def get(self, path: str) -> tuple[bytes, object]:
        from core.errors import NoNodeError

        if self.record is None:
            raise NoNodeError(path)
        return self.record.encode(), type("Stat", (), {"version": 2})()


async def test_a_change_of_the_other_kind_under_way_is_refused_and_a_finished_one_said() -> None:
    from membership.changes import Change, _record_for

    said: list[str] = []

    def change(record: ChangeRecord | None) -> Change:
        return Change(_Records(record), None, Path("t"), None, said.append, 0.0, None)  # type: ignore[arg-type]

    removing = ChangeRecord("remove", "r", {"checked": 1})
    with pytest.raises(ConfigError, match="a removal of r is under way"):
        await _record_for(change(removing), "add", "r")
    resumed = await _record_for(change(removing), "remove", "r")
    assert resumed is not None and resumed.steps == {"checked": 1} and resumed.version == 2
    added = ChangeRecord("add", "r", {"merged": 1}, finished_ms=5)
    assert await _record_for(change(added), "add", "r") is None
    assert said == ["region r was added already"]
    fresh = await _record_for(change(added), "remove", "r")  # replaces the finished addition
    assert fresh is not None and fresh.kind == "remove" and fresh.version == 2


async def test_a_step_is_tried_again_while_zookeeper_is_away_and_given_up_after_a_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from core.errors import MetadataUnavailableError
    from membership import changes

    monkeypatch.setattr(changes, "ELECTION_PAUSE_S", 0.01)
    said: list[str] = []
    change = changes.Change(None, None, Path("t"), None, said.append, 0.0, None)  # type: ignore[arg-type]
    tries: list[int] = []

    async def back_at_the_fourth() -> str:
        tries.append(1)
        if len(tries) < 4:
            raise MetadataUnavailableError("connection to ZooKeeper lost")
        return "done"

    assert await changes._through_elections(change, "zookeeper-left", back_at_the_fourth) == "done"
    assert len(tries) == 4 and len(said) == 3
    assert "ZooKeeper unavailable during zookeeper-left" in said[0]

    async def never() -> str:
        raise MetadataUnavailableError("no ZooKeeper session")

    monkeypatch.setattr(changes, "ELECTION_WAIT_S", 0.05)
    with pytest.raises(MetadataUnavailableError, match=r"zookeeper-left: ZooKeeper unavailable"):
        await changes._through_elections(change, "zookeeper-left", never)

    # the bound counts from the first failure: a step that ran longer first is tried again
    long_tries: list[int] = []

    async def long_then_away_once() -> str:
        long_tries.append(1)
        if len(long_tries) == 1:
            await asyncio.sleep(0.1)  # twice the bound, working
            raise MetadataUnavailableError("connection to ZooKeeper lost")
        return "done"

    assert await changes._through_elections(change, "copies-moved", long_then_away_once) == "done"
    assert len(long_tries) == 2


async def test_a_record_write_whose_answer_was_lost_is_found_done() -> None:
    from core.errors import BadVersionError
    from membership.changes import _save

    class Landed(_Records):
        """The write landed (version 2 holds it), its answer lost: the retry is refused."""

        async def set(self, path: str, data: bytes, *, version: int) -> object:
            raise BadVersionError(path)

    record = ChangeRecord("remove", "r", {"checked": 1}, version=1)
    await _save(Landed(record), record)  # type: ignore[arg-type]
    assert record.version == 2
    other = ChangeRecord("remove", "r", {"checked": 1, "placement-stopped": 2}, version=1)
    with pytest.raises(BadVersionError):
        await _save(Landed(record), other)  # type: ignore[arg-type]
