"""One seeded simulation run of the whole write/read path, checked by the failover checker.

Three regions, each with a write proxy, two bookies, a ZooKeeper server, a producer per
stream (half of them idempotent) and a tailing reader per stream. A nemesis drawn from the
seed injects faults one after another (kills, pauses, partitions, isolation, a region down,
a slow bookie, message loss, an owner's session expired); the network delays, reorders and
loses messages throughout. After the last heal the producers finish, every stream is
sealed, each region reads every stream in full, and an auditor counts each entry's copies.
The history is the one `globelog failover run` records (verify.history), so the same
checker judges both.

`simulate(seed)` is deterministic: the same seed gives the same history, byte for byte.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from core.dlsn import DLSN
from ledger.metadata import LedgerMetadata, LedgerState, write_set_indices
from verify.checker import CheckReport, check
from verify.history import Op
from verify.sim.bookie import SimBookie
from verify.sim.proxy import Machines, SimProxy, WriteRequest
from verify.sim.reads import decode_records, fetch_entries, read_lac
from verify.sim.services import ZK_NODE, BookieLink, SimSegment, ZkClient, ledger_path, segments_path
from verify.sim.world import ANYWHERE, World
from verify.sim.zookeeper import SimZooKeeper

REGIONS = ("r1", "r2", "r3")
WAN_S = {frozenset(("r1", "r2")): 0.020, frozenset(("r1", "r3")): 0.035, frozenset(("r2", "r3")): 0.030}
STREAMS = ("s1", "s2")
SESSION_TIMEOUT_S = 1.0
CLIENT_TIMEOUT_S = 2.0
SEND_GAP_S = 0.05  # a producer's pause between sends
ATTEMPTS_MAX = 12
POLL_S = 0.25
FAULT_KINDS = (
    "kill-write-proxy",
    "pause-write-proxy",
    "kill-bookie",
    "pause-bookie",
    "slow-bookie",
    "partition",
    "isolate-region",
    "region-down",
    "message-loss",
    "expire-session",
)


@dataclass(frozen=True, slots=True)
class SimConfig:
    workload_s: float = 8.0
    faults: tuple[str, ...] = FAULT_KINDS
    machines: Machines = field(default_factory=Machines)
    loss: float = 0.002  # background message loss


@dataclass(slots=True)
class SimResult:
    seed: int
    history: list[Op]
    report: CheckReport
    events: int

    def history_lines(self) -> list[str]:
        return [json.dumps(_body(op), sort_keys=True, separators=(",", ":")) for op in self.history]


class _History:
    def __init__(self, world: World) -> None:
        self.world = world
        self.ops: list[Op] = []

    def add(self, process: str, type_: str, f: str, **fields: Any) -> None:
        self.ops.append(Op(len(self.ops), round(self.world.now, 6), process, type_, f, **fields))


def simulate(seed: int, config: SimConfig | None = None) -> SimResult:
    config = config or SimConfig()
    world = World(seed, dict(WAN_S))
    world.loss = config.loss
    zk = SimZooKeeper()
    world.add(ZK_NODE, ANYWHERE)
    zk.create("/ledgers")
    for stream in STREAMS:
        zk.create(segments_path(stream), ((), -1), make_parents=True)
    bookies: dict[str, SimBookie] = {}
    proxies: dict[str, SimProxy] = {}
    for region in REGIONS:
        for index in range(2):
            name = f"b-{region}-{index}"
            world.add(name, region)
            bookies[name] = SimBookie(name)
    for region in REGIONS:
        name = f"wp-{region}"
        world.add(name, region)
        proxies[name] = SimProxy(name, world, zk, bookies, SESSION_TIMEOUT_S, config.machines)
        proxies[name].start()
    history = _History(world)
    _expire_sessions(world, zk)
    end = config.workload_s
    values = itertools.count()
    for region in REGIONS:
        for index, stream in enumerate(STREAMS):
            idempotent = (index + REGIONS.index(region)) % 2 == 0
            name = f"w-{region}-{stream}"
            world.add(name, region)
            Producer(name, stream, idempotent, world, proxies, history, values, end).start()
            reader = f"r-{region}-{stream}"
            world.add(reader, region)
            Reader(reader, stream, world, zk, bookies, history, end + 12).start()
    Nemesis(world, zk, proxies, bookies, history, config).schedule(end)
    world.at(end + 7.0, lambda: Sealer(world, proxies, history).start())
    for region in REGIONS:
        name = f"final-{region}"
        world.add(name, region)
        world.at(end + 9.0, lambda n=name: FinalReader(n, world, zk, bookies, history).start())
    world.at(end + 11.5, lambda: _audit(world, zk, bookies, history))
    world.run_until(end + 13.0)
    report = check(history.ops)
    return SimResult(seed, history.ops, report, world.delivered)


def _expire_sessions(world: World, zk: SimZooKeeper) -> None:
    """The ensemble's leader expiring silent sessions; only while a quorum exists anywhere
    (without one nothing expires, and sessions get a fresh timeout when it returns)."""
    state = {"had_quorum": True}

    def tick() -> None:
        quorum = any(world.zk_serves(r) for r in world.regions())
        zk.now_s = world.now
        if quorum and not state["had_quorum"]:
            zk.refresh_sessions()
        if quorum:
            zk.expire_silent()
        state["had_quorum"] = quorum
        world.at(0.1, tick)

    world.at(0.1, tick)


class Producer:
    """Sends unique values to one stream, one at a time, through the proxies: its own
    region's first, following redirects, turning to another on failure. An idempotent
    producer retries a send with the same producer seq until it is answered; a plain one
    retries too (and may land a value twice, which plain writes allow)."""

    def __init__(
        self,
        name: str,
        stream: str,
        idempotent: bool,
        world: World,
        proxies: dict[str, SimProxy],
        history: _History,
        values: itertools.count[int],
        end_s: float,
    ) -> None:
        self.name, self.stream, self.idempotent = name, stream, idempotent
        self.world, self.proxies, self.history, self.values = world, proxies, history, values
        self.end_s = end_s
        self.region = world.nodes[name].region
        self.producer_id = world.rng.randrange(1, 1 << 62) if idempotent else None
        self.seq = -1
        self.value = -1
        self.attempt = 0
        self.attempts = 0
        self.hops = 0
        self.maybe_landed = False

    def start(self) -> None:
        self.world.timer(self.name, self.world.rng.uniform(0.05, 0.3), self._next)

    def _next(self) -> None:
        if self.world.now >= self.end_s:
            return
        self.value = next(self.values)
        self.seq += 1
        self.attempts, self.hops, self.maybe_landed = 0, 0, False
        self.history.add(self.name, "invoke", "send", stream=self.stream, value=self.value, idempotent=self.idempotent)
        self._try(f"wp-{self.region}")

    def _try(self, proxy: str) -> None:
        self.attempt += 1
        attempt = self.attempt
        producer = (self.producer_id, self.seq) if self.producer_id is not None else None
        world, me = self.world, self.name

        def reply(kind: str, dlsn: DLSN | None, detail: str) -> None:
            world.send(proxy, me, lambda: self._answer(attempt, proxy, kind, dlsn, detail))

        request = WriteRequest(self.stream, self.value, producer, reply)
        world.send(me, proxy, lambda: self.proxies[proxy].handle_write(request))
        world.timer(me, CLIENT_TIMEOUT_S, lambda: self._answer(attempt, proxy, "timeout", None, ""))

    def _answer(self, attempt: int, proxy: str, kind: str, dlsn: DLSN | None, detail: str) -> None:
        if attempt != self.attempt:
            return  # a late answer to an attempt already given up
        self.attempt += 1  # no other answer to this attempt counts
        if kind == "ok":
            self.history.add(self.name, "ok", "send", stream=self.stream, value=self.value, dlsn=dlsn)
            self.world.timer(self.name, SEND_GAP_S, self._next)
            return
        if kind == "redirect" and self.hops < 3 and detail in self.proxies:
            self.hops += 1
            self._try(detail)
            return
        if kind in ("timeout", "indeterminate"):
            self.maybe_landed = True
        self.attempts += 1
        if self.attempts >= ATTEMPTS_MAX or self.world.now > self.end_s + 5.0:
            outcome = "info" if self.maybe_landed else "fail"
            self.history.add(self.name, outcome, "send", stream=self.stream, value=self.value, detail=kind)
            self.world.timer(self.name, SEND_GAP_S, self._next)
            return
        names = sorted(self.proxies)
        after = names[(names.index(proxy) + 1) % len(names)] if kind != "busy" else proxy
        self.hops = 0
        self.world.timer(self.name, 0.1 * self.attempts, lambda: self._try(after))


class _StreamReading:
    """Reads a stream forward from a position: segment list, ledger metadata, entries."""

    def __init__(self, name: str, stream: str, world: World, zk: SimZooKeeper, bookies: dict[str, SimBookie]) -> None:
        self.name, self.stream, self.world = name, stream, world
        self.zk = ZkClient(world, zk, name, SESSION_TIMEOUT_S, lambda: None)
        self.link = BookieLink(world, bookies, name)
        self.last: DLSN | None = None  # the last record delivered
        self.read_through = 0  # the segments up to this one are read to their end

    def read_some(self, done: Callable[[list[tuple[DLSN, int]] | None, bool], None]) -> None:
        """Reads what follows in the first segment not read to its end: done(records,
        at_end), at_end once the stream's segments are all completed and read; done(None,
        False) when something could not be reached."""
        zk = self.zk.zk

        def got_segments(result: Any, error: Exception | None) -> None:
            if error is not None:
                done(None, False)
                return
            (segments, _), _ = result
            todo = [s for s in segments if s.sequence > self.read_through]
            if not todo:
                done([], bool(segments) and segments[-1].completed)
                return
            segment = todo[0]
            self.zk.read(lambda: zk.get(ledger_path(segment.ledger_id)), lambda r, e: got_ledger(segment, r, e))

        def got_ledger(segment: SimSegment, result: Any, error: Exception | None) -> None:
            if error is not None:
                done(None, False)
                return
            metadata: LedgerMetadata = result[0]
            here = self.last is not None and self.last.segment == segment.sequence
            first = self.last.entry if here else 0  # type: ignore[union-attr]
            if metadata.state is LedgerState.CLOSED:
                self._entries(segment, metadata, first, metadata.last_entry_id, done)
            else:
                read_lac(
                    self.world, self.link, metadata, segment.ledger_id,
                    lambda lac: self._entries(segment, metadata, first, lac, done),
                )

        self.zk.read(lambda: zk.get(segments_path(self.stream)), got_segments)

    def _entries(
        self,
        segment: SimSegment,
        metadata: LedgerMetadata,
        first: int,
        last: int,
        done: Callable[[list[tuple[DLSN, int]] | None, bool], None],
    ) -> None:
        last = min(last, first + 30)
        to_the_end = metadata.state is LedgerState.CLOSED and last >= metadata.last_entry_id

        def got(result: dict[int, bytes] | str) -> None:
            if isinstance(result, str):
                done(None, False)
                return
            records = []
            for entry_id in sorted(result):
                for record in decode_records(result[entry_id], segment.sequence, entry_id, segment.first_seq):
                    if self.last is None or record.dlsn > self.last:
                        records.append((record.dlsn, record.value))
            if records:
                self.last = records[-1][0]
            if to_the_end:
                self.read_through = segment.sequence
            done(records, False)

        if last < first:
            if to_the_end:
                self.read_through = segment.sequence
            done([], False)
            return
        fetch_entries(self.world, self.link, metadata, segment.ledger_id, first, last, got)


class Reader:
    def __init__(self, name: str, stream: str, world: World, zk: SimZooKeeper, bookies: dict[str, SimBookie], history: _History, end_s: float) -> None:
        self.reading = _StreamReading(name, stream, world, zk, bookies)
        self.name, self.stream, self.world, self.history, self.end_s = name, stream, world, history, end_s

    def start(self) -> None:
        self.world.timer(self.name, POLL_S, self._poll)

    def _poll(self) -> None:
        if self.world.now > self.end_s:
            return
        def done(records: list[tuple[DLSN, int]] | None, _: bool) -> None:
            if records:
                region = self.world.nodes[self.name].region
                self.history.add(self.name, "ok", "poll", stream=self.stream, region=region, records=tuple(records))
            again = 0.0 if records else POLL_S
            self.world.timer(self.name, again, self._poll)

        self.reading.read_some(done)


class FinalReader:
    """After the seal: each stream read in full from this region."""

    def __init__(self, name: str, world: World, zk: SimZooKeeper, bookies: dict[str, SimBookie], history: _History) -> None:
        self.name, self.world, self.zk, self.bookies, self.history = name, world, zk, bookies, history

    def start(self) -> None:
        for stream in STREAMS:
            self._read(stream, _StreamReading(f"{self.name}", stream, self.world, self.zk, self.bookies), [])

    def _read(self, stream: str, reading: _StreamReading, found: list[tuple[DLSN, int]]) -> None:
        def done(records: list[tuple[DLSN, int]] | None, at_end: bool) -> None:
            if records:
                found.extend(records)
            if at_end:
                region = self.world.nodes[self.name].region
                self.history.add(self.name, "ok", "final", stream=stream, region=region, records=tuple(found))
                return
            delay = 0.2 if records is None else 0.0 if records else 0.05
            self.world.timer(self.name, delay, lambda: self._read(stream, reading, found))

        reading.read_some(done)


class Sealer:
    """Completes every stream's last segment through the proxies (retrying until done)."""

    def __init__(self, world: World, proxies: dict[str, SimProxy], history: _History) -> None:
        self.world, self.proxies, self.history = world, proxies, history

    def start(self) -> None:
        for stream in STREAMS:
            self._seal(stream, sorted(self.proxies)[0], 0)

    def _seal(self, stream: str, proxy: str, tries: int) -> None:
        answered = [False]

        def reply(kind: str, _: DLSN | None, detail: str) -> None:
            if answered[0]:
                return
            answered[0] = True
            if kind == "ok" or tries > 40:
                return
            names = sorted(self.proxies)
            after = detail if kind == "redirect" and detail in self.proxies else names[(names.index(proxy) + 1) % 3]
            self.world.at(0.05, lambda: self._seal(stream, after, tries + 1))

        def ask() -> None:
            if self.world.nodes[proxy].up and not self.world.nodes[proxy].paused:
                self.proxies[proxy].handle_seal(stream, reply)
            else:
                reply("down", None, "")

        self.world.at(0.0, ask)
        self.world.at(CLIENT_TIMEOUT_S, lambda: reply("timeout", None, ""))


def _audit(world: World, zk: SimZooKeeper, bookies: dict[str, SimBookie], history: _History) -> None:
    """Every entry of every completed segment: copies on its write set and their regions."""
    for stream in STREAMS:
        (segments, _), _ = zk.get(segments_path(stream))
        for segment in segments:
            metadata: LedgerMetadata = zk.get(ledger_path(segment.ledger_id))[0]
            if metadata.state is not LedgerState.CLOSED:
                history.add("auditor", "ok", "audit", stream=stream, segment=segment.sequence, value=False, detail="ledger not closed")
                continue
            short = []
            for entry_id in range(metadata.last_entry_id + 1):
                ensemble = metadata.ensemble_for_entry(entry_id)
                holders = [
                    ensemble[i]
                    for i in write_set_indices(entry_id, len(ensemble), metadata.write_quorum)
                    if bookies[ensemble[i]].holds(segment.ledger_id, entry_id) is not None
                ]
                regions = {world.nodes[b].region for b in holders}
                if len(holders) < metadata.ack_quorum or len(regions) < 2:
                    short.append(f"entry {entry_id}: {len(holders)} copies in {len(regions)} regions")
            detail = "; ".join(short[:3]) or f"{metadata.last_entry_id + 1} entries, each on >= {metadata.ack_quorum} bookies in >= 2 regions"
            history.add("auditor", "ok", "audit", stream=stream, segment=segment.sequence, value=not short, detail=detail)


class Nemesis:
    def __init__(self, world: World, zk: SimZooKeeper, proxies: dict[str, SimProxy], bookies: dict[str, SimBookie], history: _History, config: SimConfig) -> None:
        self.world, self.zk, self.proxies, self.bookies, self.history = world, zk, proxies, bookies, history
        self.config = config

    def schedule(self, end_s: float) -> None:
        rng = self.world.rng
        t = rng.uniform(0.5, 1.0)
        kinds = list(self.config.faults)
        rng.shuffle(kinds)
        while t < end_s - 1.5 and kinds:
            kind = kinds.pop()
            duration = rng.uniform(0.5, 2.5) if kind != "pause-write-proxy" else rng.uniform(1.2, 2.5) * SESSION_TIMEOUT_S
            duration = min(duration, end_s - 0.5 - t)
            self.world.at(t, lambda k=kind, d=duration: self._inject(k, d))
            t += duration + rng.uniform(0.3, 1.5)

    def _inject(self, kind: str, duration_s: float) -> None:
        world, rng = self.world, self.world.rng
        heal: Callable[[], None]
        if kind in ("kill-write-proxy", "pause-write-proxy", "expire-session"):
            owners = {p: len(proxy.owners) for p, proxy in self.proxies.items() if world.nodes[p].up}
            target = max(sorted(owners), key=lambda p: owners[p]) if owners else sorted(self.proxies)[0]
        elif kind in ("kill-bookie", "pause-bookie", "slow-bookie"):
            target = rng.choice(sorted(self.bookies))
        else:
            target = rng.choice(REGIONS)
        if kind == "kill-write-proxy":
            world.crash(target)

            def heal() -> None:
                world.restart(target)
                self.proxies[target].start()
        elif kind == "kill-bookie":
            world.crash(target)
            heal = lambda: world.restart(target)  # noqa: E731
        elif kind in ("pause-write-proxy", "pause-bookie"):
            world.pause(target)
            heal = lambda: world.resume(target)  # noqa: E731
        elif kind == "slow-bookie":
            world.nodes[target].slow_s = 0.2
            heal = lambda: setattr(world.nodes[target], "slow_s", 0.0)  # noqa: E731
        elif kind == "partition":
            other = rng.choice([r for r in REGIONS if r != target])
            pair = frozenset((target, other))
            target = f"{target}|{other}"
            world.cut.add(pair)
            heal = lambda: world.cut.discard(pair)  # noqa: E731
        elif kind == "isolate-region":
            pairs = {frozenset((target, r)) for r in REGIONS if r != target}
            world.cut |= pairs
            heal = lambda: world.cut.difference_update(pairs)  # noqa: E731
        elif kind == "region-down":
            region = target
            names = [n for n, node in world.nodes.items() if node.region == region and n.startswith(("wp-", "b-"))]
            for name in names:
                world.crash(name, host_up=False)
            world.zk_down.add(region)

            def heal() -> None:
                world.zk_down.discard(region)
                for name in names:
                    world.restart(name)
                    if name in self.proxies:
                        self.proxies[name].start()
        elif kind == "message-loss":
            world.loss = 0.1
            heal = lambda: setattr(world, "loss", self.config.loss)  # noqa: E731
        else:
            assert kind == "expire-session", kind
            session = self.proxies[target].zk.session
            if session is not None:
                self.zk.close_session(session)
            heal = lambda: None  # noqa: E731
        value = f"{kind} {target}"
        self.history.add("nemesis", "info", "fault", value=value, fault=kind)

        def healed() -> None:
            heal()
            self.history.add("nemesis", "info", "heal", value=value, fault=kind)

        world.at(duration_s, healed)


def _body(op: Op) -> dict[str, Any]:
    body: dict[str, Any] = {"time": op.time, "process": op.process, "type": op.type, "f": op.f}
    for key in ("stream", "value", "region", "fault", "segment"):
        if getattr(op, key) is not None:
            body[key] = getattr(op, key)
    if op.dlsn is not None:
        body["dlsn"] = str(op.dlsn)
    if op.records:
        body["records"] = [[str(d), v] for d, v in op.records]
    if op.idempotent:
        body["idempotent"] = True
    if op.detail:
        body["detail"] = op.detail
    return body
