"""globelog's real proxies on the simulated world: a write proxy and a read proxy in each
region (aiohttp, ownership, takeover, idempotence, the read path), reached with the real
clients over simulated TCP. A producer in us-east writes idempotently, resending with the same
producer sequence whatever came back without an acknowledgement; on a seed-chosen write the
stream's owner is crashed, paused (SIGSTOP, past its 1.5 s session), or left running with its
port refusing connections (a firewall's REJECT: the proxy the client turns to breaks the lock
of an owner that still runs); a reader in eu-west then reads the stream through its read proxy.

Checked: each acknowledged producer sequence is read back exactly once, all in the producer's
order; writes resume on another proxy. With the producer table forgotten at takeover (the
broken variant in region/idempotence/rebuild.py) the resends of writes that had landed land again,
and the run must see it."""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import pytest

from core import runtime
from core.errors import GlobelogError
from region.client import ReadClient
from region.client.proxy_client import ProxyClient
from region.write_proxy import WriteProxy
from tests.support.sim_thread import under_hash_seeds
from verify.sim import proxies
from verify.sim.io.cluster import SimCluster
from verify.sim.io.http import SimConnector
from verify.sim.io.loop import run

SEEDS = range(1, 9)
RECORDS = 40
PRODUCER = 0x77
CAUGHT_WITHIN = 8


@dataclass
class Outcome:
    acknowledged: list[int] = field(default_factory=list)
    read: list[int] = field(default_factory=list)
    longest_wait_s: float = 0.0  # from a write's first send to its acknowledgement
    # the owner crashed on a machine that stayed up, or runs on with its port refusing
    # connections: its address refuses connections
    gone_process: bool = False
    # an owner left running (its port refusing) still holds its writer at the end
    kept_by_refused_owner: bool = False

    def violations(self) -> list[str]:
        found = []
        counts = Counter(self.read)
        doubled = sorted(seq for seq, n in counts.items() if n > 1)
        if doubled:
            found.append(f"producer seqs read twice: {doubled[:10]}")
        lost = sorted(set(self.acknowledged) - set(counts))
        if lost:
            found.append(f"acknowledged and never read: {lost[:10]}")
        if list(dict.fromkeys(self.read)) != sorted(set(self.read)):
            found.append("records out of the producer's order")
        return found


class ProxiesRun:
    def __init__(self, seed: int) -> None:
        self.cluster = SimCluster(seed)
        self.loop = self.cluster.loop
        self.choices = random.Random(seed)
        self.writers = proxies.proxies_of(self.cluster, "write")
        self.readers = proxies.proxies_of(self.cluster, "read")
        self.outcome = Outcome()
        self.refused: proxies.SimProxy | None = None

    async def produce(self, fault: str) -> None:
        loop = self.loop
        fault_at = self.choices.randrange(5, RECORDS - 10)
        urls = [p.url for p in self.writers]
        async with ProxyClient(
            urls, "ns", deadline_s=60, tls=False, connector=SimConnector
        ) as client:
            await client.create("s")
            for seq in range(RECORDS):
                if seq == fault_at:  # the fault lands while this write is on its way
                    owner = str((await client.describe("s"))["owner"]).split("@")[0]
                    delay = self.choices.uniform(0.0, 0.15)
                    loop.call_later(delay, self.fault, owner, fault)
                started = loop.time()
                while True:  # resend, same producer seq, until acknowledged
                    try:
                        await client.write("s", f"r{seq}".encode(), producer=(PRODUCER, seq))
                        break
                    except GlobelogError:
                        await asyncio.sleep(0.2)
                self.outcome.acknowledged.append(seq)
                self.outcome.longest_wait_s = max(
                    self.outcome.longest_wait_s, loop.time() - started
                )

    def fault(self, owner: str, fault: str) -> None:
        host = self.loop.hosts[owner]
        if fault == "paused":
            self.loop.pause(host)
            self.loop.call_later(3.0, self.loop.resume, host)
        elif fault == "refusing":  # the process runs on, its ZooKeeper session too
            proxy = next(p for p in self.writers if p.proxy.name == owner)
            port = urlsplit(proxy.url).port
            assert port is not None
            self.outcome.gone_process = True  # to the proxy that probes it
            self.cluster.network.refuse(host, port)
            self.refused = proxy
        else:
            machine_up = self.choices.random() < 0.5
            self.outcome.gone_process = machine_up
            self.loop.crash(host, machine_up=machine_up)

    async def read(self) -> None:
        urls = [p.url for p in self.readers if p.proxy.region == "eu-west"]
        async with ReadClient(urls, "ns", tls=False, connector=SimConnector) as reader:
            async for record in reader.read("s", from_seq=0, follow=False):
                self.outcome.read.append(int(record.payload[1:]))

    async def main(self, fault: str) -> None:
        await self.cluster.start()
        for proxy in (*self.writers, *self.readers):
            proxies.start(self.cluster, proxy)
        await asyncio.sleep(1.0)  # the proxies register
        producer = self.cluster.add_host("producer", "us-east")
        async with asyncio.timeout(300):
            await self.loop.spawn(producer, self.produce(fault))
        await asyncio.sleep(4.0)  # a paused owner comes back and finds itself fenced
        reader = self.cluster.add_host("reader", "eu-west")
        async with asyncio.timeout(120):
            await self.loop.spawn(reader, self.read())
        if self.refused is not None:
            assert isinstance(self.refused.server, WriteProxy)
            kept = self.refused.server.ownership.owned_here("ns", "s")
            self.outcome.kept_by_refused_owner = kept is not None and not kept.writer.failed


def simulate(seed: int, *, fault: str = "crashed") -> Outcome:
    proxies_run = ProxiesRun(seed)
    run(proxies_run.loop, proxies_run.main(fault))
    return proxies_run.outcome


@pytest.mark.parametrize("fault", ["crashed", "paused", "refusing"])
@pytest.mark.parametrize("seed", SEEDS)
def test_through_the_proxies_every_acknowledged_write_is_read_once_in_order(
    seed: int, fault: str
) -> None:
    outcome = simulate(seed, fault=fault)
    assert outcome.violations() == []
    assert len(outcome.acknowledged) == RECORDS
    print(f"longest wait {outcome.longest_wait_s:.3f} s (refused: {outcome.gone_process})")
    if outcome.gone_process:
        # the proxy the client turns to finds the owner's address refusing connections and
        # breaks its lock: no waiting for the owner's 1.5 s session to end (none ends at all
        # when the owner runs on); an owner that runs on sees its lock node go, and its
        # writer fails at once
        assert outcome.longest_wait_s < proxies.SESSION_TIMEOUT_S
        assert not outcome.kept_by_refused_owner
    else:  # a paused owner, or a machine gone: only the session's end frees the stream
        assert outcome.longest_wait_s > 1.0


def test_forgetting_the_producer_table_is_caught_through_the_proxies() -> None:
    with runtime.breaking(runtime.FORGET_PRODUCERS):
        for seed in range(1, CAUGHT_WITHIN + 1):
            if simulate(seed).violations():
                print(f"{runtime.FORGET_PRODUCERS}: caught at seed {seed} through the proxies")
                return
    pytest.fail(f"{runtime.FORGET_PRODUCERS}: no violation in {CAUGHT_WITHIN} seeds")


FINGERPRINT = """
import logging, sys
logging.disable(logging.WARNING)
from tests.simulation.sim.test_proxies_on_sim import ProxiesRun
from verify.sim.io.loop import run
r = ProxiesRun(3)
run(r.loop, r.main("paused"))
print(r.outcome.acknowledged, r.outcome.read, r.outcome.longest_wait_s, r.loop.time(),
      r.cluster.ensemble.operations, r.cluster.network.bytes_delivered)
"""


def test_a_seed_replays_exactly_in_another_process() -> None:
    """A failing seed is a bug report: another process (another hash seed, so other set and
    dict orders of strings) replays it to the byte."""
    runs = under_hash_seeds(FINGERPRINT)
    assert runs[0] == runs[1] != ""
