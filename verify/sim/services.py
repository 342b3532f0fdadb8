"""How a simulated process reaches ZooKeeper and the bookies: requests over the World's
network, answers delivered back as callbacks, every one of them either answered or lost
(the caller's own deadline notices a lost one; nothing here waits forever).

`ZkClient` keeps a session as a ZooKeeper client does: it pings every third of the session
timeout, learns of an expiry from the ensemble, and gives its session up itself after two
timeouts without an answer (as global_meta's MetaStore does).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from core import errors
from ledger.machines.signals import BookieFailure
from verify.sim.bookie import SimBookie, StoredEntry
from verify.sim.world import World
from verify.sim.zookeeper import SimZooKeeper

ZK_NODE = "zk"  # the ensemble as one node; its reach is World.zk_serves
ZK_WRITE_S = 0.03  # a write's trip through the leader (a WAN round trip, roughly)
GIVE_UP_AFTER_SESSIONS = 2
OP_TIMEOUT_S = 1.0  # a request without an answer by then fails (MetadataUnavailableError)

Answer = Callable[[Any, Exception | None], None]


@dataclass(frozen=True, slots=True)
class SimSegment:
    """A stream segment's metadata: its ledger and, once completed, its end."""

    sequence: int
    ledger_id: int
    first_seq: int
    completed: bool = False
    record_count: int = 0
    last_entry_id: int = -1


class ZkClient:
    """One process's ZooKeeper session. `on_expired` runs when the session is known gone."""

    def __init__(
        self,
        world: World,
        zk: SimZooKeeper,
        node: str,
        timeout_s: float,
        on_expired: Callable[[], None],
    ) -> None:
        self.world, self.zk, self.node = world, zk, node
        self.timeout_s = timeout_s
        self.on_expired = on_expired
        self.session: int | None = None
        self._last_answer_s = world.now
        self._connecting = False

    @property
    def connected(self) -> bool:
        return self.session is not None

    def start(self) -> None:
        """Opens a session (when the quorum is reachable) and keeps it alive."""
        self._connect()
        self._tick()

    def _connect(self) -> None:
        if self._connecting:
            return
        self._connecting = True

        def opened(session: Any, error: Exception | None) -> None:
            self._connecting = False
            if error is None:
                self.session = session
                self._last_answer_s = self.world.now

        self._call(lambda: self.zk.open_session(self.timeout_s), opened, write=True)

    def _tick(self) -> None:
        if self.session is None:
            self._connect()
        else:
            session = self.session
            self._call(lambda: self.zk.heard_from(session), lambda *_: None, write=False)
            if self.world.now - self._last_answer_s > GIVE_UP_AFTER_SESSIONS * self.timeout_s:
                self._expired(session)
        self.world.timer(self.node, self.timeout_s / 3, self._tick)

    def _expired(self, session: int) -> None:
        if self.session == session:
            self.session = None
            self.on_expired()

    def call(self, operation: Callable[[int], Any], answer: Answer, *, write: bool) -> None:
        """Runs `operation(session)` at the ensemble; `answer(result, error)` on the way back.
        MetadataUnavailableError at once without a session."""
        session = self.session
        if session is None:
            answer(None, errors.MetadataUnavailableError("no ZooKeeper session"))
            return

        def run() -> Any:
            self.zk.heard_from(session)
            return operation(session)

        def back(result: Any, error: Exception | None) -> None:
            if isinstance(error, errors.SessionExpiredError):
                self._expired(session)
            answer(result, error)

        self._call(run, back, write=write)

    def read(self, operation: Callable[[], Any], answer: Answer) -> None:
        """A read that needs no session (a reader's look at the metadata)."""
        self._call(operation, answer, write=False)

    def _call(self, run: Callable[[], Any], answer: Answer, *, write: bool) -> None:
        world, node = self.world, self.world.nodes[self.node]
        answered = [False]

        def once(result: Any, error: Exception | None) -> None:
            if not answered[0]:
                answered[0] = True
                answer(result, error)

        world.timer(
            self.node,
            OP_TIMEOUT_S,
            lambda: once(None, errors.MetadataUnavailableError("no answer from ZooKeeper in time")),
        )
        if not world.zk_serves(node.region):
            return  # no server answers: the deadline above does
        delay = ZK_WRITE_S if write else 0.0

        def at_ensemble() -> None:
            if not world.zk_serves(node.region):
                return
            self.zk.now_s = world.now
            try:
                result, error = run(), None
            except errors.MetadataError as err:
                result, error = None, err
            world.at(delay, lambda: world.send(ZK_NODE, self.node, lambda: reply(result, error)))

        def reply(result: Any, error: Exception | None) -> None:
            self._last_answer_s = world.now
            once(result, error)

        world.send(self.node, ZK_NODE, at_ensemble)


class BookieLink:
    """Requests from one process to the bookies; each answer runs `answer(result)` with the
    bookie's StoredEntry / (id, StoredEntry) / None, or a BookieFailure. A lost request gets
    no answer: the pure machines time it out."""

    def __init__(self, world: World, bookies: dict[str, SimBookie], node: str) -> None:
        self.world, self.bookies, self.node = world, bookies, node

    def request(
        self, bookie: str, run: Callable[[SimBookie], Any], answer: Callable[[Any], None]
    ) -> None:
        world, node = self.world, self.node
        target = self.bookies[bookie]
        host = world.nodes[bookie]
        if not host.up and host.refuses and world.nodes[node].up:
            if world.reachable(world.nodes[node].region, host.region):  # refused at once
                rtt = 2 * world.latency_s(world.nodes[node], host)
                world.timer(node, rtt, lambda: answer(BookieFailure.BOOKIE_DOWN))
            return

        def at_bookie() -> None:
            result = run(target)
            world.send(bookie, node, lambda: answer(result))

        world.send(node, bookie, at_bookie)

    def add(
        self,
        bookie: str,
        ledger_id: int,
        entry_id: int,
        entry: StoredEntry,
        recovery: bool,
        answer: Callable[[Any], None],
    ) -> None:
        self.request(bookie, lambda b: b.add(ledger_id, entry_id, entry, recovery=recovery), answer)


def ledger_path(ledger_id: int) -> str:
    return f"/ledgers/{ledger_id}"


def segments_path(stream: str) -> str:
    return f"/streams/{stream}/segments"


def lock_dir(stream: str) -> str:
    return f"/streams/{stream}/lock"
