"""The simulation's clients: producers sending through the proxies, readers tailing the
streams, the sealer that completes every stream at the end, and the final readers. Each
records its operations in the history (verify.history's format), and every request it makes
ends: answered, or given up at its own deadline.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

from core.dlsn import DLSN
from ledger.codecs.metadata import LedgerMetadata, LedgerState
from verify.history import Op
from verify.sim.bookie import SimBookie
from verify.sim.proxy import SimProxy, WriteRequest
from verify.sim.reads import decode_records, fetch_entries, read_lac
from verify.sim.services import (
    BookieLink,
    SimSegment,
    ZkClient,
    ledger_path,
    segments_path,
)
from verify.sim.world import World
from verify.sim.zookeeper import SimZooKeeper

CLIENT_TIMEOUT_S = 2.0
SEND_GAP_S = 0.05  # a producer's pause between sends
ATTEMPTS_MAX = 12
POLL_S = 0.4
READER_SESSION_S = 1.0


class History:
    """The operations recorded so far, as the checker reads them."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.ops: list[Op] = []

    def add(self, process: str, type_: str, f: str, **fields: Any) -> None:
        self.ops.append(Op(len(self.ops), round(self.world.now, 6), process, type_, f, **fields))


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
        history: History,
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
        self.history.add(
            self.name,
            "invoke",
            "send",
            stream=self.stream,
            value=self.value,
            idempotent=self.idempotent,
        )
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
            self.history.add(
                self.name, "ok", "send", stream=self.stream, value=self.value, dlsn=dlsn
            )
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
            self.history.add(
                self.name, outcome, "send", stream=self.stream, value=self.value, detail=kind
            )
            self.world.timer(self.name, SEND_GAP_S, self._next)
            return
        names = sorted(self.proxies)
        after = names[(names.index(proxy) + 1) % len(names)] if kind != "busy" else proxy
        self.hops = 0
        self.world.timer(self.name, 0.1 * self.attempts, lambda: self._try(after))


class _StreamReading:
    """Reads a stream forward from a position: segment list, ledger metadata, entries."""

    def __init__(
        self, name: str, stream: str, world: World, zk: SimZooKeeper, bookies: dict[str, SimBookie]
    ) -> None:
        self.name, self.stream, self.world = name, stream, world
        self.zk = ZkClient(world, zk, name, READER_SESSION_S, lambda: None)  # reads need none
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
            self.zk.read(
                lambda: zk.get(ledger_path(segment.ledger_id)),
                lambda r, e: got_ledger(segment, r, e),
            )

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
                    self.world,
                    self.link,
                    metadata,
                    segment.ledger_id,
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
                for record in decode_records(
                    result[entry_id], segment.sequence, entry_id, segment.first_seq
                ):
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
    def __init__(
        self,
        name: str,
        stream: str,
        world: World,
        zk: SimZooKeeper,
        bookies: dict[str, SimBookie],
        history: History,
        end_s: float,
    ) -> None:
        self.reading = _StreamReading(name, stream, world, zk, bookies)
        self.name, self.stream, self.world, self.history, self.end_s = (
            name,
            stream,
            world,
            history,
            end_s,
        )

    def start(self) -> None:
        self.world.timer(self.name, POLL_S, self._poll)

    def _poll(self) -> None:
        if self.world.now > self.end_s:
            return

        def done(records: list[tuple[DLSN, int]] | None, _: bool) -> None:
            if records:
                region = self.world.nodes[self.name].region
                self.history.add(
                    self.name,
                    "ok",
                    "poll",
                    stream=self.stream,
                    region=region,
                    records=tuple(records),
                )
            again = 0.0 if records else POLL_S
            self.world.timer(self.name, again, self._poll)

        self.reading.read_some(done)


class FinalReader:
    """After the seal: each stream read in full from this region."""

    def __init__(
        self,
        name: str,
        world: World,
        zk: SimZooKeeper,
        bookies: dict[str, SimBookie],
        history: History,
        streams: tuple[str, ...],
    ) -> None:
        self.name, self.world, self.zk, self.bookies = name, world, zk, bookies
        self.history, self.streams = history, streams

    def start(self) -> None:
        for stream in self.streams:
            self._read(
                stream,
                _StreamReading(self.name, stream, self.world, self.zk, self.bookies),
                [],
            )

    def _read(self, stream: str, reading: _StreamReading, found: list[tuple[DLSN, int]]) -> None:
        def done(records: list[tuple[DLSN, int]] | None, at_end: bool) -> None:
            if records:
                found.extend(records)
            if at_end:
                region = self.world.nodes[self.name].region
                self.history.add(
                    self.name, "ok", "final", stream=stream, region=region, records=tuple(found)
                )
                return
            delay = 0.2 if records is None else 0.0 if records else 0.05
            self.world.timer(self.name, delay, lambda: self._read(stream, reading, found))

        reading.read_some(done)


class Sealer:
    """Completes every stream's last segment through the proxies (retrying until done)."""

    def __init__(
        self,
        world: World,
        proxies: dict[str, SimProxy],
        history: History,
        streams: tuple[str, ...],
    ) -> None:
        self.world, self.proxies, self.history, self.streams = world, proxies, history, streams

    def start(self) -> None:
        for stream in self.streams:
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
            after = (
                detail
                if kind == "redirect" and detail in self.proxies
                else names[(names.index(proxy) + 1) % 3]
            )
            self.world.at(0.05, lambda: self._seal(stream, after, tries + 1))

        def ask() -> None:
            if self.world.nodes[proxy].up and not self.world.nodes[proxy].paused:
                self.proxies[proxy].handle_seal(stream, reply)
            else:
                reply("down", None, "")

        self.world.at(0.0, ask)
        self.world.at(CLIENT_TIMEOUT_S, lambda: reply("timeout", None, ""))
