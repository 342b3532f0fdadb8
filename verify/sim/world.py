"""The simulation's clock, event queue and network: one seeded random source decides every
delay, loss and order, so a seed replays exactly.

Nodes (proxies, bookies, clients) live in regions. A message from one node to another takes
the link's latency times a random factor (so messages overtake each other), and is lost when
the link is cut (a partition, an isolated region), the network drops it (`loss`), or its
receiver is down or was restarted since it was sent. A paused node (SIGSTOP) neither runs
timers nor takes messages; both wait and are delivered, in order, when it resumes. The
ZooKeeper ensemble has one server per region and serves a client whose region can reach a
majority of the servers that are up.
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections.abc import Callable
from dataclasses import dataclass, field

LOCAL_S = 0.001  # one way inside a region
ANYWHERE = "*"  # the region of the ZooKeeper ensemble's node: its reach is `zk_serves`
JITTER = 0.5  # each delay is its latency times a factor in [1 - JITTER, 1 + JITTER]


@dataclass(slots=True)
class Node:
    name: str
    region: str
    up: bool = True
    paused: bool = False
    incarnation: int = 0  # bumped by each restart: messages to an older one are lost
    held: list[Callable[[], None]] = field(default_factory=list)  # while paused
    slow_s: float = 0.0  # added to every message to or from it (a slow node)
    refuses: bool = False  # down but its host is up: connections are refused at once


class World:
    def __init__(self, seed: int, wan_s: dict[frozenset[str], float]) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.now = 0.0
        self.nodes: dict[str, Node] = {}
        self.wan_s = wan_s  # one-way latency between two regions
        self.cut: set[frozenset[str]] = set()  # region pairs that cannot reach each other
        self.zk_down: set[str] = set()  # regions whose ZooKeeper server is down
        self.loss = 0.0
        self.delivered = 0
        self._regions: list[str] = []
        self._queue: list[tuple[float, int, Callable[[], None]]] = []
        self._order = itertools.count()

    # -- nodes ---------------------------------------------------------------------------------

    def add(self, name: str, region: str) -> Node:
        node = self.nodes[name] = Node(name, region)
        self._regions = sorted({n.region for n in self.nodes.values()} - {ANYWHERE})
        return node

    def regions(self) -> list[str]:
        return self._regions

    def crash(self, name: str, *, host_up: bool = True) -> None:
        node = self.nodes[name]
        node.up = False
        node.refuses = host_up
        node.paused = False
        node.held.clear()
        node.incarnation += 1

    def restart(self, name: str) -> None:
        self.nodes[name].up = True

    def pause(self, name: str) -> None:
        self.nodes[name].paused = True

    def resume(self, name: str) -> None:
        node = self.nodes[name]
        node.paused = False
        held, node.held = node.held, []
        for deliver in held:
            self.at(0.0, deliver)

    # -- time ----------------------------------------------------------------------------------

    def at(self, delay_s: float, action: Callable[[], None]) -> None:
        heapq.heappush(self._queue, (self.now + delay_s, next(self._order), action))

    def timer(self, name: str, delay_s: float, action: Callable[[], None]) -> None:
        """Runs `action` on node `name` after `delay_s`, unless it crashed in between (a
        paused node runs it when it resumes)."""
        incarnation = self.nodes[name].incarnation
        self.at(delay_s, lambda: self._run_on(name, incarnation, action))

    def run_until(self, end_s: float) -> None:
        queue = self._queue
        while queue and queue[0][0] <= end_s:
            when, _, action = heapq.heappop(queue)
            self.now = when
            action()
        self.now = max(self.now, end_s)

    # -- messages ------------------------------------------------------------------------------

    def reachable(self, a: str, b: str) -> bool:
        """Whether regions `a` and `b` can talk now."""
        # Most of a run has no cut: answer that without building a pair.
        if not self.cut or a == b or ANYWHERE in (a, b):
            return True
        return frozenset((a, b)) not in self.cut

    def latency_s(self, src: Node, dst: Node) -> float:
        if src.region == dst.region or ANYWHERE in (src.region, dst.region):
            base = LOCAL_S
        else:
            base = self.wan_s[frozenset((src.region, dst.region))]
        factor = 1 + self.rng.uniform(-JITTER, JITTER)
        return base * factor + src.slow_s + dst.slow_s

    def send(self, src: str, dst: str, action: Callable[[], None]) -> None:
        """Delivers `action` to run on `dst` after the link's latency, unless lost."""
        source, target = self.nodes[src], self.nodes[dst]
        if not source.up or not self.reachable(source.region, target.region):
            return
        if self.loss and self.rng.random() < self.loss:
            return
        incarnation = target.incarnation

        def arrive() -> None:
            if self.reachable(source.region, target.region):
                self._run_on(dst, incarnation, action)

        self.at(self.latency_s(source, target), arrive)

    def _run_on(self, name: str, incarnation: int, action: Callable[[], None]) -> None:
        node = self.nodes[name]
        if not node.up or node.incarnation != incarnation:
            return
        if node.paused:
            node.held.append(lambda: self._run_on(name, incarnation, action))
            return
        self.delivered += 1
        action()

    # -- ZooKeeper's quorum --------------------------------------------------------------------

    def zk_serves(self, region: str) -> bool:
        """Whether a client in `region` reaches a ZooKeeper quorum: the servers it can reach
        (its own region's and those of regions not cut from it) that are up are a majority."""
        regions = self.regions()
        reached = [r for r in regions if r not in self.zk_down and self.reachable(region, r)]
        return len(reached) * 2 > len(regions)
