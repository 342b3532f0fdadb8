"""Adding and removing a region while the system runs: checked steps, each recorded in
ZooKeeper as it completes, so a command that stops (killed, refused, out of time) is run
again and goes on from the first step not done.

    /globelog/regions/<region>    {"kind": "add"|"remove", "steps": {step: done_ms}, ...}

Every step is also safe to run twice: it looks at the system before it acts (a drain already
there, a ZooKeeper member already gone), so a command killed between acting and recording
repeats nothing harmful.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import ssl
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from core import errors
from core.routes import PublishedTopology, publish_topology
from core.settings.rebuild_settings import CHECK_NOW_ZNODE, DECOMMISSION_ZNODE
from core.topology import Topology
from core.topology_loader import parse_topology
from global_meta import MetaStore
from global_meta.streams import ROOT as NAMESPACES_ROOT
from global_meta.streams import StreamMetaStore
from ledger import MIN_REGIONS_KEY, LedgerClient, LedgerState, VersionedMetadata
from localcluster.metadata import read_published, registered_bookies, write_published
from localcluster.nodes import loopback_client_port
from localcluster.probes import zookeeper_mode, zookeeper_tls
from membership.plans import HEADER, Plan, plan_remove, write_topology
from membership.safety import (
    Facts,
    LedgerView,
    Report,
    decommission_findings,
    removal_findings,
)
from rebuild.bookies import decommission
from rebuild.service import read_rebuilders
from region.drain import set_region_drained
from region.registry import proxy_path

ROOT = "/globelog/regions"
RECORD_FORMAT_VERSION = 1
ADD_STEPS = ("merged", "zookeeper-joined", "published", "registered", "replication")
REMOVE_STEPS = (
    "checked",
    "placement-stopped",
    "ownership-moved",
    "copies-moved",
    "zookeeper-left",
    "published",
    "file-written",
)
PROGRESS_EVERY_S = 5.0
POLL_S = 1.0
SCAN_EVERY_S = 5.0  # a scan of every ledger's metadata: not every second
# How long a step is tried again through ZooKeeper being away, ELECTION_PAUSE_S apart. A
# reconfiguration that removes the leader's node can leave the rest electing for longer than
# an election: a follower that missed the change waits out syncLimit (10 s deployed) before it
# looks for a leader, and a new leader waits up to initLimit (60 s) for a quorum to sync.
ELECTION_WAIT_S = 90.0
ELECTION_PAUSE_S = 2.0
CLEAN_SCANS = 3  # rounds of "none left, and still none a scan later" before giving up
PUBLISH_ATTEMPTS = 8  # compare-and-set retries of a republication racing another
log = logging.getLogger(__name__)
T = TypeVar("T")

DONE, STOPPED, REFUSED = 0, 3, 2  # exit codes: finished, stopped (run again), refused


@dataclass(slots=True)
class ChangeRecord:
    kind: str
    region: str
    steps: dict[str, int] = field(default_factory=dict)
    started_ms: int = 0
    finished_ms: int | None = None
    forced: bool = False
    version: int = -1  # the znode's; -1 before it exists

    @property
    def order(self) -> tuple[str, ...]:
        return ADD_STEPS if self.kind == "add" else REMOVE_STEPS

    def done(self, step: str) -> bool:
        return step in self.steps

    def encode(self) -> bytes:
        return json.dumps(
            {
                "format_version": RECORD_FORMAT_VERSION,
                "kind": self.kind,
                "region": self.region,
                "steps": self.steps,
                "started_ms": self.started_ms,
                "finished_ms": self.finished_ms,
                "forced": self.forced,
            },
            sort_keys=True,
        ).encode()

    @classmethod
    def decode(cls, data: bytes, version: int, where: str) -> ChangeRecord:
        try:
            doc = json.loads(data)
            return cls(
                str(doc["kind"]),
                str(doc["region"]),
                {str(k): int(v) for k, v in doc["steps"].items()},
                int(doc["started_ms"]),
                None if doc.get("finished_ms") is None else int(doc["finished_ms"]),
                bool(doc.get("forced", False)),
                version,
            )
        except (ValueError, KeyError, TypeError, AttributeError) as err:
            raise errors.MetadataError(f"{where}: not a region change record: {err!r}") from err

    def describe(self) -> list[str]:
        head = f"{self.kind} {self.region}: " + (
            "finished" if self.finished_ms is not None else "under way (run the command again)"
        )
        lines = [head + (" (forced past the safety check)" if self.forced else "")]
        for step in self.order:
            at = self.steps.get(step)
            when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(at / 1000)) if at else None
            lines.append(
                f"  {'done' if at else 'to do':6} {step}" + (f"  {when} UTC" if when else "")
            )
        return lines


def _now_ms() -> int:
    return int(time.time() * 1000)


async def read_record(store: MetaStore, region: str) -> ChangeRecord | None:
    path = f"{ROOT}/{region}"
    try:
        await store.sync(path)
        data, stat = await store.get(path)
    except errors.NoNodeError:
        return None
    return ChangeRecord.decode(data, stat.version, path)


async def read_records(store: MetaStore) -> list[ChangeRecord]:
    try:
        names = await store.children(ROOT)
    except errors.NoNodeError:
        return []
    found = [await read_record(store, name) for name in sorted(names)]
    return [r for r in found if r is not None]


async def _save(store: MetaStore, record: ChangeRecord) -> None:
    """Writes `record` at its version. Tried again after a lost answer, a write that had
    landed finds the record as it wrote it (a newer version): that is taken as done."""
    path = f"{ROOT}/{record.region}"
    try:
        if record.version < 0:
            await store.create(path, record.encode(), make_parents=True)
            record.version = 0
        else:
            stat = await store.set(path, record.encode(), version=record.version)
            record.version = stat.version
    except (errors.NodeExistsError, errors.BadVersionError):
        data, stat = await store.get(path)
        if data != record.encode():
            raise
        record.version = stat.version


@dataclass(slots=True)
class Change:
    """What every step of a change works with: the operator's session (to ZooKeeper nodes
    that stay), a ledger client, the topology file and how to report."""

    store: MetaStore
    ledgers: LedgerClient
    topology_path: Path
    topology: Topology  # the file as it was read at the start
    say: Callable[[str], None]
    wait_s: float
    zk_tls: ssl.SSLContext | None
    lock: ChangeLock | None = None  # the run's (one_change_at_a_time), kept through elections

    async def wait_for(
        self,
        what: str,
        left: Callable[[], Awaitable[list[str]]],
        wait_s: float | None = None,
        poll_s: float = POLL_S,
    ) -> bool:
        """Polls `left` (what is still to happen) until it is empty (True) or `wait_s` is over
        (False), saying what is left every PROGRESS_EVERY_S."""
        deadline = time.monotonic() + (self.wait_s if wait_s is None else wait_s)
        said = 0.0
        while True:
            if self.lock is not None:  # a session replaced between two polls: the lock again
                await self.lock.keep()
            remaining = await left()
            if not remaining:
                return True
            now = time.monotonic()
            if now >= deadline:
                self.say(f"  {what}: still {len(remaining)} left: {', '.join(remaining[:8])}")
                return False
            if now - said >= PROGRESS_EVERY_S:
                self.say(f"  {what}: {len(remaining)} left: {', '.join(remaining[:8])}")
                said = now
            await asyncio.sleep(min(poll_s, max(0.0, deadline - now)))

    async def republish(self, change: Callable[[PublishedTopology], PublishedTopology]) -> None:
        for _ in range(PUBLISH_ATTEMPTS):
            current = await read_published(self.store)
            if current is None:
                raise errors.ConfigError("no published topology: run `globelog init` first")
            published, version = current
            wanted = change(published)
            if wanted == published:
                return
            try:
                await write_published(self.store, wanted, version)
                return
            except errors.BadVersionError:
                continue
        raise errors.MetadataError(
            f"the published topology changed under {PUBLISH_ATTEMPTS} attempts to republish it"
        )


# ------------------------------------------------------------------------------ removal


async def gather_facts(
    store: MetaStore, ledgers: LedgerClient, topology: Topology, zk_tls: ssl.SSLContext | None
) -> Facts:
    """What the safety checker needs, read from the running system."""
    current = await read_published(store)
    if current is None:
        raise errors.ConfigError("no published topology: run `globelog init` first")
    published = current[0]
    writable, read_only = await registered_bookies(store)
    leaving = await _decommissioned(store)
    views: list[LedgerView] = []

    async def keep(versioned: VersionedMetadata) -> None:
        metadata = versioned.metadata
        custom = dict(metadata.custom_metadata)
        rule = custom.get(MIN_REGIONS_KEY)
        views.append(
            LedgerView(
                versioned.ledger_id,
                tuple(tuple(e.bookies) for e in metadata.ensembles),
                metadata.write_quorum,
                metadata.ack_quorum,
                int(rule) if rule is not None else 1,
            )
        )

    await ledgers.visit_ledgers(keep)
    config = await store.ensemble()
    node_region = {n.server_id: n.region for n in topology.zookeeper}
    host_region = {n.client.host: n.region for n in topology.zookeeper}
    members = {
        sid: node_region.get(sid, host_region.get(config.host_of(sid), "?"))
        for sid in config.servers
    }
    serving = set()
    for node in topology.zookeeper:
        if node.server_id in members and await zookeeper_mode(node.client, zk_tls):
            serving.add(node.server_id)
    proxies = {}
    for name in published.regions:
        try:
            proxies[name] = len(await store.children(proxy_path(name, "write")))
        except errors.NoNodeError:
            proxies[name] = 0
    return Facts(
        published,
        published.replication or topology.replication,
        frozenset(writable | read_only),
        frozenset(writable - leaving),
        tuple(views),
        members,
        frozenset(serving),
        proxies,
    )


async def _decommissioned(store: MetaStore) -> set[str]:
    try:
        return set(await store.children(DECOMMISSION_ZNODE))
    except errors.NoNodeError:
        return set()


async def check_decommission(
    store: MetaStore, ledgers: LedgerClient, topology: Topology, bookie_id: str
) -> Report:
    """The safety check of taking one bookie out of service (`globelog bookie decommission`)."""
    facts = await gather_facts(store, ledgers, topology, zookeeper_tls(topology.security))
    return decommission_findings(facts, bookie_id)


async def check_removal(change: Change, region: str) -> Report:
    facts = await gather_facts(change.store, change.ledgers, change.topology, change.zk_tls)
    return removal_findings(facts, region)


async def _record_for(change: Change, kind: str, region: str) -> ChangeRecord | None:
    """The record of this `kind` of change under way for `region`, a new one when none is
    (a finished change of the other kind is replaced), or None when it is finished already;
    ConfigError while a change of the other kind is under way."""
    record = await read_record(change.store, region)
    if record is not None and record.kind == kind:
        if record.finished_ms is None:
            return record
        change.say(f"region {region} was {'added' if kind == 'add' else 'removed'} already")
        return None
    if record is not None and record.finished_ms is None:
        raise errors.ConfigError(
            f"{'an addition' if record.kind == 'add' else 'a removal'} of {region} is under "
            f"way: run `globelog region {record.kind}` again to finish it first"
        )
    version = -1 if record is None else record.version
    return ChangeRecord(kind, region, started_ms=_now_ms(), version=version)


async def remove_region(
    change: Change, region: str, *, force: bool = False, until: str | None = None
) -> int:
    """Runs (or resumes) the removal of `region`; an exit code (DONE, STOPPED, REFUSED)."""
    record = await _record_for(change, "remove", region)
    if record is None:
        return DONE
    bookies = [b for b in change.topology.bookies if b.region == region]
    ids = {b.bookie_id for b in bookies}
    steps: dict[str, Callable[[], Awaitable[bool]]] = {
        "checked": lambda: _checked(change, region, record, force),
        "placement-stopped": lambda: _placement_stopped(change, region),
        "ownership-moved": lambda: _ownership_moved(change, region),
        "copies-moved": lambda: _copies_moved(change, ids),
        "zookeeper-left": lambda: _zookeeper_left(change, region),
        "published": lambda: _published_without(change, region),
        "file-written": lambda: _file_written(change, region),
    }
    code = await _run(change, record, steps, until)
    if code == DONE and record.finished_ms is not None:
        hosts = sorted(
            {b.endpoint.host for b in bookies}
            | {n.client.host for n in change.topology.zookeeper if n.region == region}
            | {
                p.endpoint.host
                for r in change.topology.regions
                if r.name == region
                for p in r.write_proxies + r.read_proxies + r.consoles
            }
        )
        change.say(
            f"region {region} is removed: no read or write needs it. Its hosts may be "
            f"switched off: {', '.join(hosts)}"
        )
    return code


async def _run(
    change: Change,
    record: ChangeRecord,
    steps: dict[str, Callable[[], Awaitable[bool]]],
    until: str | None,
) -> int:
    if until is not None and until not in steps:
        raise errors.ConfigError(f"--until {until!r}: expected one of {list(steps)}")
    last = list(steps)[-1]
    for step, run in steps.items():
        if not record.done(step):
            change.say(f"{record.kind} {record.region}: {step} ...")
            try:
                done = await _through_elections(change, step, run)
            except _RefusedError as refused:
                change.say(str(refused))
                return REFUSED
            if not done:
                change.say(
                    f"{record.kind} {record.region}: stopped at {step}; run the command again "
                    "to go on from there"
                )
                return STOPPED
            record.steps[step] = _now_ms()
            if step == last:  # the last step and the end in one write
                record.finished_ms = record.steps[step]
            await _through_elections(change, step, lambda: _save(change.store, record))
            change.say(f"{record.kind} {record.region}: {step} done")
        if step == until and step != last:
            change.say(f"stopped after {step} as asked (--until); run again without it to go on")
            return DONE
    return DONE


LOCK_WAIT_S = 30.0  # a killed command's lock goes with its session (10 s): wait that out
LOCK = f"{ROOT}-lock"


@dataclass(slots=True)
class ChangeLock:
    """The region changes' lock as one run holds it: an ephemeral znode of `session`, whose
    data is the run's token (what it does, and a random tag: the run's own lost sessions are
    known by it). A run whose session was lost (given up through a long election) takes the
    lock again in its new session before it goes on, unless another run took it meanwhile."""

    store: MetaStore
    who: str
    token: bytes = b""
    session: int | None = None  # the session the lock is held in; None before it is taken

    def __post_init__(self) -> None:
        self.token = self.token or f"{self.who} [{uuid.uuid4().hex[:12]}]".encode()

    async def take(self, wait_s: float, *, again: bool = False) -> None:
        """Creates the lock, waiting up to `wait_s` while another session holds it: a killed
        run's goes with its session, and so does one of this run's lost sessions. `again`:
        this run held it before, so a lock of another run now is no wait but a stop."""
        deadline = time.monotonic() + wait_s
        while True:
            with contextlib.suppress(errors.NodeExistsError):  # the get below says whose
                await self.store.create(LOCK, self.token, ephemeral=True, make_parents=True)
            try:
                data, stat = await self.store.get(LOCK)
            except errors.NoNodeError:
                continue
            mine = data == self.token
            if mine and stat.ephemeral_owner == self.store.session_id:
                self.session = stat.ephemeral_owner
                return
            holder = data.decode(errors="replace")
            if again and not mine:
                raise errors.ConfigError(
                    f"this run's ZooKeeper session was lost and another region change took "
                    f"the lock meanwhile ({holder}); this run stops: run it again once that "
                    "one has ended"
                )
            if time.monotonic() >= deadline:
                raise errors.ConfigError(
                    f"the lock of this run's lost ZooKeeper session outlived {wait_s:.0f} s; "
                    "run the command again"
                    if mine
                    else f"another region change is running ({holder}); one runs at a time: "
                    "wait for it to end"
                )
            log.info("waiting for the region changes' lock, held by %s", holder)
            await asyncio.sleep(POLL_S)

    async def keep(self) -> None:
        """The lock held by the session the store has now: taken again after a lost one.
        Raises MetadataUnavailableError while the store has no session."""
        if self.session is None:
            return  # never taken: not this lock's run
        now = self.store.session_id
        if now is None:
            raise errors.MetadataUnavailableError("region change: no ZooKeeper session now")
        if now == self.session:
            return
        log.warning("the region change's ZooKeeper session was replaced: taking the lock again")
        await self.take(LOCK_WAIT_S, again=True)  # until it is, self.session stays the old one

    async def release(self) -> None:
        if self.session is None or self.store.session_id != self.session:
            return  # gone with its session
        with contextlib.suppress(errors.GlobelogError):
            await self.store.delete(LOCK, version=-1)


@contextlib.asynccontextmanager
async def one_change_at_a_time(
    store: MetaStore, who: str, wait_s: float = LOCK_WAIT_S
) -> AsyncIterator[ChangeLock]:
    """Holds the region changes' lock (an ephemeral znode: it goes with a killed command's
    session) for one run. A run that finds it held waits up to `wait_s` (a killed run's
    session ends meanwhile), then is refused, saying whose it is. Give the lock to the
    run's `Change`, which keeps it through a replaced session."""
    lock = ChangeLock(store, who)
    await lock.take(wait_s)
    try:
        yield lock
    finally:
        await lock.release()


async def _through_elections(change: Change, step: str, run: Callable[[], Awaitable[T]]) -> T:
    """`run` again (every step looks before it acts) while ZooKeeper is away, for up to
    ELECTION_WAIT_S from the first failure: a reconfiguration that removes the leader's node
    makes the others elect a new one, and a session given up or expired meanwhile is
    replaced (the lock taken again)."""
    away_since: float | None = None
    while True:
        try:
            if change.lock is not None:
                await change.lock.keep()
            return await run()
        except (errors.MetadataUnavailableError, errors.SessionExpiredError) as err:
            now = time.monotonic()
            away_since = now if away_since is None else away_since
            away_s = now - away_since
            if away_s + ELECTION_PAUSE_S > ELECTION_WAIT_S:
                raise errors.MetadataUnavailableError(
                    f"{step}: ZooKeeper unavailable for {away_s:.0f} s (expected back within "
                    f"{ELECTION_WAIT_S:.0f} s of an election): {err}; run the command again"
                ) from err
            change.say(
                f"  ZooKeeper unavailable during {step} for {away_s:.0f} s ({err}); trying again"
            )
            await asyncio.sleep(ELECTION_PAUSE_S)


async def finish(store: MetaStore, record: ChangeRecord, step: str) -> None:
    """Records `step` done and the change finished (one write)."""
    record.steps[step] = record.finished_ms = _now_ms()
    await _save(store, record)


class _RefusedError(Exception):
    pass


async def _checked(change: Change, region: str, record: ChangeRecord, force: bool) -> bool:
    report = await check_removal(change, region)
    try:
        plan_remove(change.topology_path.read_text(), region)
    except errors.TopologyError as err:  # the last step could not write the file
        report.refusals.append(f"the topology file without {region} would not load: {err}")
    for line in report.lines():
        change.say(f"  {line}")
    if not report.safe:
        if not force:
            raise _RefusedError(
                f"removing {region} refused by the safety check (nothing was changed); "
                "--force goes on regardless"
            )
        record.forced = True
        change.say(f"  going on regardless (--force): {len(report.refusals)} refusal(s)")
    return True


async def _placement_stopped(change: Change, region: str) -> bool:
    """Every ledger client stops placing new copies in the region (and a replacement moves a
    copy out of it) once it reads the republication."""
    await change.republish(
        lambda p: p.draining(region) if region in p.regions and region not in p.drained else p
    )
    return True


async def streams_owned_in(store: MetaStore, region: str) -> list[str]:
    """Every stream whose ownership lock a proxy of `region` holds ("namespace/stream")."""
    try:
        namespaces = await store.children(NAMESPACES_ROOT)
    except errors.NoNodeError:
        return []
    owned = []
    for namespace in namespaces:
        streams = StreamMetaStore(store, namespace)
        try:
            names = await streams.list_streams()
        except errors.NoNodeError:
            continue
        for name in names:
            owner = await streams.owner(name)
            if owner is not None and owner.endswith(f"@{region}"):
                owned.append(f"{namespace}/{name}")
    return owned


async def _ownership_moved(change: Change, region: str) -> bool:
    """The region's write proxies release every stream and send its writers to another
    region's proxies, which take the streams (as `globelog stream drain` does for one)."""
    await set_region_drained(change.store, region, True)
    return await change.wait_for(
        f"streams owned in {region}", lambda: streams_owned_in(change.store, region)
    )


async def ledgers_naming(ledgers: LedgerClient, bookies: set[str]) -> list[str]:
    """The ledgers whose metadata still names one of `bookies` in any ensemble ("N", or
    "N (open)" for one still being written: its writer rolls it off a leaving bookie, or its
    stream's next owner closes it)."""
    found: list[tuple[int, str]] = []

    async def look(versioned: VersionedMetadata) -> None:
        metadata = versioned.metadata
        if any(b in bookies for e in metadata.ensembles for b in e.bookies):
            state = "" if metadata.state is LedgerState.CLOSED else " (open)"
            found.append((versioned.ledger_id, f"{versioned.ledger_id}{state}"))

    await ledgers.visit_ledgers(look)
    return [name for _, name in sorted(found)]


async def _copies_moved(change: Change, bookies: set[str]) -> bool:
    """Each of the region's bookies is decommissioned: the auditor marks every ledger with a
    copy there, the rebuilders of every region re-make those copies elsewhere, and writers
    roll segments still open on them. Done when no ledger names them."""
    for bookie_id in sorted(bookies):
        await decommission(change.store, bookie_id)
    if not await read_rebuilders(change.store):
        change.say(
            "  no rebuilder is running: nothing would copy. Start `globelog serve rebuilder "
            "--region R` in a region that stays (docs/deploy.md), then run this again"
        )
        return False
    # a full audit now: it also marks ledgers placed there by a client that had not yet
    # read the drain (the auditor deletes the znode when it starts the check)
    with contextlib.suppress(errors.NodeExistsError):
        await change.store.create(CHECK_NOW_ZNODE, b"", make_parents=True)
    for _ in range(CLEAN_SCANS):
        # done when a scan finds none and one more, a scan later, still finds none: a scan
        # is no snapshot, and a writer that had not yet read the decommission may have
        # placed a copy there meanwhile
        if not await change.wait_for(
            "ledgers with copies on the region's bookies",
            lambda: ledgers_naming(change.ledgers, bookies),
            poll_s=SCAN_EVERY_S,
        ):
            return False
        await asyncio.sleep(SCAN_EVERY_S)
        if not await ledgers_naming(change.ledgers, bookies):
            return True
    return False


async def _zookeeper_left(change: Change, region: str) -> bool:
    leaving = [n.server_id for n in change.topology.zookeeper if n.region == region]
    config = await change.store.ensemble()
    still = [sid for sid in leaving if sid in config.servers]
    if still:
        config = await change.store.reconfig(leaving=still)
        change.say(f"  ZooKeeper members now: {sorted(config.servers)}")
    return True


async def _published_without(change: Change, region: str) -> bool:
    await change.republish(lambda p: p.without_region(region) if region in p.regions else p)
    return True


async def _file_written(change: Change, region: str) -> bool:
    text = change.topology_path.read_text()
    if region not in _region_names(text):
        return True
    try:
        plan = plan_remove(text, region)
    except errors.TopologyError as err:  # only past a refusal (--force)
        change.say(
            f"  topology file not rewritten (without {region} it would not load: {err}); "
            "edit it by hand and copy it to every host"
        )
        return True
    _rewrite(change, plan, "remove", f"without {region}")
    return True


def _rewrite(change: Change, plan: Plan, verb: str, what: str) -> None:
    """The topology file replaced by `plan`'s, said with where the previous one is kept."""
    done = "added" if verb == "add" else "removed"
    kept = write_topology(
        change.topology_path,
        plan.text,
        HEADER.format(what=f"region {plan.region} {done}", verb=verb, when=time.ctime()),
        f"{verb}-{plan.region}",
    )
    change.say(
        f"  wrote {change.topology_path} {what} (the previous file is {kept}); copy it to "
        "every host"
    )


def _region_names(text: str) -> list[str]:
    return list(parse_topology(text, "topology").region_names)


# ------------------------------------------------------------------------------- addition


async def add_region(change: Change, plan: Plan, *, until: str | None = None) -> int:
    """Runs (or resumes) joining the region of `plan` to the running system."""
    region = plan.region
    record = await _record_for(change, "add", region)
    if record is None:
        return DONE
    steps: dict[str, Callable[[], Awaitable[bool]]] = {
        "merged": lambda: _merged(change, plan),
        "zookeeper-joined": lambda: _zookeeper_joined(change, plan),
        "published": lambda: _published_with(change, plan),
        "registered": lambda: _registered(change, plan),
        "replication": lambda: _replication(change, plan),
    }
    code = await _run(change, record, steps, until)
    if code == DONE and record.finished_ms is not None:
        change.say(f"region {region} is in service: new ensembles may place copies there")
    return code


async def _merged(change: Change, plan: Plan) -> bool:
    if plan.region in _region_names(change.topology_path.read_text()):
        return True
    _rewrite(change, plan, "add", f"with {plan.region} (the new region's hosts too)")
    return True


def server_spec(topology: Topology, server_id: int) -> str:
    """A joining node's member spec; its client part is the plain port the node listens on
    (with TLS on, the loopback one: ZooKeeper re-binds a node's client port to its spec's)."""
    node = next(n for n in topology.zookeeper if n.server_id == server_id)
    client = (
        f"127.0.0.1:{loopback_client_port(node)}" if topology.security.tls else node.client.address
    )
    return (
        f"server.{node.server_id}={node.client.host}:{node.peer_port}:{node.election_port}"
        f":participant;{client}"
    )


async def _zookeeper_joined(change: Change, plan: Plan) -> bool:
    nodes = [n for n in plan.after.zookeeper if n.region == plan.region]
    config = await change.store.ensemble()
    joining = []
    for node in nodes:
        if node.server_id in config.servers:
            continue
        if await zookeeper_mode(node.client, change.zk_tls) is None:
            change.say(
                f"  ZooKeeper node {node.name} does not answer at {node.client.address}: start "
                f"it (`globelog config zookeeper {node.name} --data-dir D --write D/zoo.cfg`, "
                "then ZooKeeper's QuorumPeerMain with that file; docs/deploy.md)"
            )
            return False
        joining.append(server_spec(plan.after, node.server_id))
    if joining:
        config = await change.store.reconfig(joining=joining)
        change.say(f"  ZooKeeper members now: {sorted(config.servers)}")

    async def not_voting() -> list[str]:
        modes = [(n, await zookeeper_mode(n.client, change.zk_tls)) for n in nodes]
        return [n.name for n, mode in modes if mode not in ("leader", "follower")]

    return await change.wait_for("ZooKeeper nodes voting", not_voting, wait_s=60.0)


def with_region(
    current: PublishedTopology, wanted: PublishedTopology, region: str
) -> PublishedTopology:
    """`current` with `region` and its bookies taken from `wanted` (the merged file's
    publication): nothing else of the file is published over what runs."""
    known = {b.bookie_id for b in current.bookies}
    joining = tuple(b for b in wanted.bookies if b.region == region and b.bookie_id not in known)
    bookies = current.bookies + joining
    regions = current.regions if region in current.regions else (*current.regions, region)
    addresses = {
        r: {
            **current.addresses.get(r, {}),
            **{b.bookie_id: wanted.address(r, b.bookie_id) for b in bookies},
        }
        for r in regions
    }
    drained = tuple(r for r in current.drained if r != region)
    return dataclasses.replace(
        current, regions=regions, bookies=bookies, addresses=addresses, drained=drained
    )


async def _published_with(change: Change, plan: Plan) -> bool:
    """The region and its bookies published (the replication stays as it was until the
    region's bookies answer: `_replication`); a drain or decommission left by an earlier
    removal of a region of that name ends."""
    region = plan.region
    await set_region_drained(change.store, region, False)
    for bookie in plan.after.region(region).bookies:
        await decommission(change.store, bookie.bookie_id, undo=True)
    wanted = publish_topology(plan.after)
    await change.republish(lambda current: with_region(current, wanted, region))
    return True


async def _replication(change: Change, plan: Plan) -> bool:
    """The topology's replication published for ledgers made from now on, once a writer
    can place it (a rule that needs the new region needs its bookies first)."""
    wanted = plan.after.replication
    current = await read_published(change.store)
    if current is not None and current[0].replication == wanted:
        return True
    if not change.ledgers.can_place(wanted):
        change.say(
            f"  replication E/W/A {wanted.ensemble_size}/{wanted.write_quorum}/"
            f"{wanted.ack_quorum} min_regions_for_durability="
            f"{wanted.min_regions_for_durability} cannot be placed on the bookies that answer "
            "yet; start the region's bookies"
        )
        return False
    await change.republish(lambda p: dataclasses.replace(p, replication=wanted))
    return True


async def _registered(change: Change, plan: Plan) -> bool:
    region = plan.after.region(plan.region)

    async def missing() -> list[str]:
        writable, read_only = await registered_bookies(change.store)
        up = writable | read_only
        absent = [b.name for b in region.bookies if b.bookie_id not in up]
        try:
            proxies = set(await change.store.children(proxy_path(plan.region, "write")))
        except errors.NoNodeError:
            proxies = set()
        absent += [p.name for p in region.write_proxies if p.name not in proxies]
        return absent

    return await change.wait_for(f"bookies and write proxies of {plan.region}", missing)


def records_json(records: list[ChangeRecord]) -> list[dict[str, Any]]:
    return [
        {
            "kind": r.kind,
            "region": r.region,
            "steps": {s: r.steps.get(s) for s in r.order},
            "started_ms": r.started_ms,
            "finished_ms": r.finished_ms,
            "forced": r.forced,
        }
        for r in records
    ]
