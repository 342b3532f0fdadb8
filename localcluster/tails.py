"""Probes of the region services shared by the demo, `globelog bench proxy` and the failover
run: where a region's proxy listens, a reader that long-polls a region's read proxy and
measures how soon records written with {"n", "t"} payloads reach it, and the pages of one
stream as an HTTP client of a read proxy gets them, with every answer that is not a page
raised as a GlobelogError (the failover run records or judges each)."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from core.dlsn import DLSN
from core.errors import GlobelogError, ProxyError, ProxyUnreachableError, answered_error
from localcluster.controller import Cluster
from localcluster.probes import operator_session

POLL_WAIT_MS = 1000
READ_RETRY_S = 0.5


@dataclass
class Received:
    """What one region's reader got: counts by record number, delivery latencies."""

    region: str
    counts: dict[int, int] = field(default_factory=dict)
    latencies_s: list[float] = field(default_factory=list)
    errors: int = 0
    next_seq: int = 0


def proxy_url(cluster: Cluster, region: str, kind: str) -> str:
    group = cluster.topology.region(region)
    proxy = (group.write_proxies if kind == "write" else group.read_proxies)[0]
    return cluster.topology.proxy_url(proxy)


async def tail_region(
    url: str,
    received: Received,
    stop: asyncio.Event,
    stream: str,
    namespace: str,
) -> None:
    """Long-polls the region's read proxy; retries through the region's outage."""
    path = f"{url}/v1/namespaces/{namespace}/streams/{stream}/records"
    timeout = aiohttp.ClientTimeout(total=POLL_WAIT_MS / 1000 + 5)
    async with operator_session(timeout) as http:
        while not stop.is_set():
            query = {"from_seq": str(received.next_seq), "wait_ms": str(POLL_WAIT_MS)}
            try:
                async with http.get(path, params=query) as answer:
                    page = await answer.json()
                    if answer.status != 200:
                        raise aiohttp.ClientError(f"{answer.status}: {page.get('code')}")
            except (aiohttp.ClientError, TimeoutError, ValueError):
                if _being_cancelled():  # aiohttp may turn a cancel into a timeout
                    raise asyncio.CancelledError from None
                received.errors += 1
                await asyncio.sleep(READ_RETRY_S)
                continue
            now = time.time()
            for record in page["records"]:
                value = json.loads(record["payload"])
                received.counts[value["n"]] = received.counts.get(value["n"], 0) + 1
                received.latencies_s.append(now - value["t"])
            if page["next_seq"] is not None:
                received.next_seq = page["next_seq"]


def _being_cancelled() -> bool:
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


class ReadAnswerInvalidError(GlobelogError):
    """The read proxy answered something that is not its documented page or error: a bug."""

    code = "read_answer_invalid"


@dataclass(frozen=True, slots=True)
class PagedRecord:
    seq: int
    dlsn: DLSN
    payload: bytes


class ProxyPages:
    """The pages of one stream from one read proxy, from sequence id `from_seq` on, each
    asked for where the last one ended, as an HTTP reader of the proxy takes them.

    A page's request waits at most `wait_ms` for its first record (the proxy's long poll), and
    the whole request at most that plus REQUEST_SLACK_S."""

    REQUEST_SLACK_S = 5.0

    def __init__(
        self, http: aiohttp.ClientSession, url: str, namespace: str, stream: str, from_seq: int = 0
    ) -> None:
        self.path = f"{url}/v1/namespaces/{namespace}/streams/{stream}/records"
        self.next_seq = from_seq
        self._http = http

    async def next(self, wait_ms: int = POLL_WAIT_MS, max_records: int = 1000) -> list[PagedRecord]:
        query = {"from_seq": str(self.next_seq), "max": str(max_records), "wait_ms": str(wait_ms)}
        timeout = aiohttp.ClientTimeout(total=wait_ms / 1000 + self.REQUEST_SLACK_S)
        try:
            async with self._http.get(self.path, params=query, timeout=timeout) as answer:
                status, text = answer.status, await answer.text()
        except (aiohttp.ClientError, TimeoutError) as err:
            if _being_cancelled():  # aiohttp may turn a cancel into a timeout
                raise asyncio.CancelledError from None
            raise ProxyUnreachableError(
                f"GET {self.path} from_seq {self.next_seq}: {type(err).__name__}: {err}"
            ) from err
        body = _json_object(self.path, status, text)
        if status != 200:
            raise _answered(body, status, f"GET {self.path} from_seq {self.next_seq}")
        try:
            page = [
                PagedRecord(int(r["seq"]), DLSN.parse(r["dlsn"]), _payload(r))
                for r in body["records"]
            ]
        except (KeyError, TypeError, ValueError, GlobelogError) as err:
            raise ReadAnswerInvalidError(
                f"GET {self.path}: a page that is not the documented one ({err!r}): {text:.200}"
            ) from err
        if page:
            self.next_seq = page[-1].seq + 1
        return page


def _answered(body: dict[str, Any], status: int, request: str) -> GlobelogError:
    code, message = str(body.get("code")), str(body.get("message"))
    retriable = bool(body.get("retriable"))
    error = answered_error(code, message, retriable)
    if error is None:
        return ProxyError(code, message, retriable, status)
    error.add_note(f"answered to {request} with HTTP {status}")
    return error


def _json_object(path: str, status: int, text: str) -> dict[str, Any]:
    try:
        body = json.loads(text)
    except ValueError:
        body = None
    if not isinstance(body, dict):
        raise ReadAnswerInvalidError(
            f"GET {path}: HTTP {status} with a body that is not a JSON object: {text:.200}"
        )
    return body


def _payload(record: dict[str, Any]) -> bytes:
    if "payload" in record:
        return str(record["payload"]).encode()
    return base64.b64decode(record["payload_b64"], validate=True)
