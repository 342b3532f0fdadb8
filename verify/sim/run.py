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
from dataclasses import dataclass, field
from typing import Any

from ledger.codecs.metadata import LedgerMetadata, LedgerState, write_set_indices
from verify.checker import CheckReport, check
from verify.history import Op
from verify.sim.bookie import SimBookie
from verify.sim.nemesis import FAULT_KINDS, Nemesis
from verify.sim.proxy import Machines, SimProxy
from verify.sim.services import ZK_NODE, ledger_path, segments_path
from verify.sim.workload import FinalReader, History, Producer, Reader, Sealer
from verify.sim.world import ANYWHERE, World
from verify.sim.zookeeper import SimZooKeeper

REGIONS = ("r1", "r2", "r3")
WAN_S = {
    frozenset(("r1", "r2")): 0.020,
    frozenset(("r1", "r3")): 0.035,
    frozenset(("r2", "r3")): 0.030,
}
STREAMS = ("s1", "s2")
SESSION_TIMEOUT_S = 1.0


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
    events: int  # messages and timers delivered
    unfinished: list[str]  # what did not end: a final read missing, a send never answered

    @property
    def ok(self) -> bool:
        return self.report.valid and not self.unfinished

    def history_lines(self) -> list[str]:
        return [json.dumps(_body(op), sort_keys=True, separators=(",", ":")) for op in self.history]


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
    history = History(world)
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
            Reader(reader, stream, world, zk, bookies, history, end + 6).start()
    nemesis = Nemesis(world, zk, proxies, bookies, history, SESSION_TIMEOUT_S, config.loss)
    nemesis.schedule(config.faults, end)
    world.at(end + 7.0, lambda: Sealer(world, proxies, history, STREAMS).start())
    for region in REGIONS:
        name = f"final-{region}"
        world.add(name, region)
        final = FinalReader(name, world, zk, bookies, history, STREAMS)
        world.at(end + 9.0, final.start)
    world.at(end + 14.5, lambda: _audit(world, zk, bookies, history))
    world.run_until(end + 15.0)
    report = check(history.ops)
    return SimResult(seed, history.ops, report, world.delivered, _unfinished(history.ops))


def _unfinished(history: list[Op]) -> list[str]:
    """Liveness after the heal: every region read every stream in full, every send ended."""
    problems = []
    finals = {(op.stream, op.region) for op in history if op.f == "final" and op.type == "ok"}
    for stream in STREAMS:
        for region in REGIONS:
            if (stream, region) not in finals:
                problems.append(f"no final read of {stream} in {region}")
    open_sends: dict[tuple[str, str], Op] = {}
    for op in history:
        if op.f == "send" and op.stream is not None:
            key = (op.process, op.stream)
            if op.type == "invoke":
                open_sends[key] = op
            else:
                open_sends.pop(key, None)
    problems.extend(f"send never answered: {op.describe()}" for op in open_sends.values())
    return problems


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


def _audit(world: World, zk: SimZooKeeper, bookies: dict[str, SimBookie], history: History) -> None:
    """Every entry of every completed segment: copies on its write set and their regions."""
    for stream in STREAMS:
        (segments, _), _ = zk.get(segments_path(stream))
        for segment in segments:
            metadata: LedgerMetadata = zk.get(ledger_path(segment.ledger_id))[0]
            short = _short_entries(world, bookies, metadata, segment.ledger_id)
            if metadata.state is not LedgerState.CLOSED:
                short = ["ledger not closed"]
            detail = "; ".join(short[:3]) or (
                f"{metadata.last_entry_id + 1} entries, each on >= {metadata.ack_quorum} "
                "bookies in >= 2 regions"
            )
            history.add(
                "auditor",
                "ok",
                "audit",
                stream=stream,
                segment=segment.sequence,
                value=not short,
                detail=detail,
            )


def _short_entries(
    world: World, bookies: dict[str, SimBookie], metadata: LedgerMetadata, ledger_id: int
) -> list[str]:
    """The entries (through the closed end) held by fewer than the ack quorum of their write
    set, or all in one region."""
    short = []
    for entry_id in range(metadata.last_entry_id + 1):
        ensemble = metadata.ensemble_for_entry(entry_id)
        holders = [
            ensemble[i]
            for i in write_set_indices(entry_id, len(ensemble), metadata.write_quorum)
            if bookies[ensemble[i]].holds(ledger_id, entry_id) is not None
        ]
        regions = {world.nodes[b].region for b in holders}
        if len(holders) < metadata.ack_quorum or len(regions) < 2:
            short.append(f"entry {entry_id}: {len(holders)} copies in {len(regions)} regions")
    return short


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
