"""The simulation's nemesis: faults drawn from the seed, one after another, each recorded
in the history with its heal (the same kinds as `globelog failover run`, plus message loss
and an owner's ZooKeeper session expired by the ensemble)."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from verify.sim.bookie import SimBookie
from verify.sim.proxy import SimProxy
from verify.sim.workload import History
from verify.sim.world import World
from verify.sim.zookeeper import SimZooKeeper

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
SLOW_S = 0.2  # a slow bookie's extra delay each way
LOSS_DURING_FAULT = 0.1

Heal = Callable[[], None]


class Nemesis:
    def __init__(
        self,
        world: World,
        zk: SimZooKeeper,
        proxies: dict[str, SimProxy],
        bookies: dict[str, SimBookie],
        history: History,
        session_timeout_s: float,
        background_loss: float,
    ) -> None:
        self.world, self.zk, self.proxies, self.bookies = world, zk, proxies, bookies
        self.history = history
        self.session_timeout_s = session_timeout_s
        self.background_loss = background_loss
        self.regions = world.regions()

    def schedule(self, kinds: tuple[str, ...], end_s: float) -> None:
        """Faults in a seeded order (each kind once before any repeats), from ~0.5 s on, one
        at a time with a gap between, all healed by `end_s` - 0.5."""
        rng = self.world.rng
        t = rng.uniform(0.5, 1.0)
        order = list(kinds)
        rng.shuffle(order)
        while t < end_s - 1.5 and order:
            kind = order.pop()
            if kind == "pause-write-proxy":  # past the session timeout, or it is no fault
                duration = rng.uniform(1.2, 2.5) * self.session_timeout_s
            else:
                duration = rng.uniform(0.5, 2.5)
            duration = min(duration, end_s - 0.5 - t)
            self.world.at(t, partial(self._inject, kind, duration))
            t += duration + rng.uniform(0.3, 1.5)

    def _inject(self, kind: str, duration_s: float) -> None:
        target, heal = getattr(self, "_" + kind.replace("-", "_"))()
        value = f"{kind} {target}"
        self.history.add("nemesis", "info", "fault", value=value, fault=kind)

        def healed() -> None:
            heal()
            self.history.add("nemesis", "info", "heal", value=value, fault=kind)

        self.world.at(duration_s, healed)

    # -- targets -------------------------------------------------------------------------------

    def _busiest_proxy(self) -> str:
        """The running proxy owning the most streams (the one whose loss costs most)."""
        owners = {
            name: len(proxy.owners)
            for name, proxy in self.proxies.items()
            if self.world.nodes[name].up
        }
        if not owners:
            return sorted(self.proxies)[0]
        return max(sorted(owners), key=lambda name: owners[name])

    def _any_bookie(self) -> str:
        return self.world.rng.choice(sorted(self.bookies))

    # -- faults: each returns (target, heal) ---------------------------------------------------

    def _kill_write_proxy(self) -> tuple[str, Heal]:
        target = self._busiest_proxy()
        self.world.crash(target)

        def heal() -> None:
            self.world.restart(target)
            self.proxies[target].start()

        return target, heal

    def _pause_write_proxy(self) -> tuple[str, Heal]:
        target = self._busiest_proxy()
        self.world.pause(target)
        return target, lambda: self.world.resume(target)

    def _expire_session(self) -> tuple[str, Heal]:
        target = self._busiest_proxy()
        session = self.proxies[target].zk.session
        if session is not None:
            self.zk.close_session(session)
        return target, lambda: None

    def _kill_bookie(self) -> tuple[str, Heal]:
        target = self._any_bookie()
        self.world.crash(target)
        return target, lambda: self.world.restart(target)

    def _pause_bookie(self) -> tuple[str, Heal]:
        target = self._any_bookie()
        self.world.pause(target)
        return target, lambda: self.world.resume(target)

    def _slow_bookie(self) -> tuple[str, Heal]:
        node = self.world.nodes[self._any_bookie()]
        node.slow_s = SLOW_S

        def heal() -> None:
            node.slow_s = 0.0

        return node.name, heal

    def _partition(self) -> tuple[str, Heal]:
        rng = self.world.rng
        one = rng.choice(self.regions)
        other = rng.choice([r for r in self.regions if r != one])
        pair = frozenset((one, other))
        self.world.cut.add(pair)
        return f"{one}|{other}", lambda: self.world.cut.discard(pair)

    def _isolate_region(self) -> tuple[str, Heal]:
        region = self.world.rng.choice(self.regions)
        pairs = {frozenset((region, r)) for r in self.regions if r != region}
        self.world.cut |= pairs
        return region, lambda: self.world.cut.difference_update(pairs)

    def _region_down(self) -> tuple[str, Heal]:
        world = self.world
        region = world.rng.choice(self.regions)
        servers = sorted(
            name
            for name, node in world.nodes.items()
            if node.region == region and (name in self.proxies or name in self.bookies)
        )
        for name in servers:
            world.crash(name, host_up=False)
        world.zk_down.add(region)

        def heal() -> None:
            world.zk_down.discard(region)
            for name in servers:
                world.restart(name)
                if name in self.proxies:
                    self.proxies[name].start()

        return region, heal

    def _message_loss(self) -> tuple[str, Heal]:
        self.world.loss = LOSS_DURING_FAULT

        def heal() -> None:
            self.world.loss = self.background_loss

        return f"{LOSS_DURING_FAULT:.0%}", heal
