"""`globelog stream|write|read` through the region's proxies, when they run.

Library mode (cli.stream_commands) talks to ZooKeeper and the bookies itself; this mode sends
the same commands to the region's write proxy (writes, create, delete, list, describe,
truncate) and read proxy (reads), as an application would. `--direct` forces library mode.
"""

from __future__ import annotations

import base64
import json
from typing import Any, TextIO

import aiohttp

from cli.stream_commands import _line_problem, _stdin_lines
from core.records import ENTRY_RECORDS_BYTES_MAX
from core.topology import Topology
from localcluster.probes import operator_session
from reader.positions import By, Position
from region.client import ProxyClient, proxy_error

PROBE_TIMEOUT_S = 0.5
BATCH_RECORDS_MAX = 10_000
READ_PAGE = 1000
FOLLOW_WAIT_MS = 5000
END_WAIT_MS = 1000  # without --follow, a page that stays empty this long is the end


def proxy_urls(topology: Topology, region: str) -> tuple[str | None, str | None]:
    """The URLs of the region's first write and read proxies (None where it has none)."""
    found = topology.region(region)
    urls = [
        topology.proxy_url(p[0]) if p else None for p in (found.write_proxies, found.read_proxies)
    ]
    return urls[0], urls[1]


async def answers(url: str | None) -> bool:
    """Whether the proxy at `url` serves; the proxy's refusal if it does not take our token
    (never a silent fall back to library mode)."""
    if url is None:
        return False
    timeout = aiohttp.ClientTimeout(total=PROBE_TIMEOUT_S)
    try:
        async with (
            operator_session(timeout) as http,
            http.get(f"{url}/v1/health") as answer,
        ):
            if answer.status == 401:
                body = await answer.json(content_type=None)
                raise proxy_error(body, answer.status, f"GET {url}/v1/health")
            # 403: it serves and took the token, which lacks only `observe`
            return answer.status in (200, 403)
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return False


async def stream_action(client: ProxyClient, action: str, name: str | None) -> Any:
    if action == "list":
        return await client.list_streams()
    assert name is not None
    if action == "create":
        await client.create(name)
        return {"created": name, "namespace": client.namespace}
    if action == "delete":
        return await client.delete(name)
    return await client.describe(name)


async def write_lines(
    client: ProxyClient, name: str, batch: bool, stdin: Any, out: TextIO, err: TextIO
) -> int:
    """One record per stdin line through the write proxy; as library mode: one JSON ack per
    line, in order; a bad line stops the input (exit 2) after the lines before it.

    The lines go as an idempotent producer's writes: the client retries a write whose
    outcome it could not learn (an owner lost mid-write), and each line still lands once."""
    pending: list[bytes] = []
    pending_bytes = 0
    producer = client.producer(name)

    async def send() -> None:
        nonlocal pending, pending_bytes
        if pending:
            for acked in await producer.write_bulk(pending):
                body = {"dlsn": str(acked.dlsn), "txid": acked.txid, "seq": acked.seq}
                out.write(json.dumps(body) + "\n")
            out.flush()
        pending, pending_bytes = [], 0

    status = 0
    async for number, line in _stdin_lines(stdin):
        problem = _line_problem(number, line)
        if problem is not None:
            print(f"globelog: error [invalid_record]: {problem}", file=err)
            status = 2
            break
        pending.append(line)
        pending_bytes += len(line)
        full = len(pending) >= BATCH_RECORDS_MAX or pending_bytes >= ENTRY_RECORDS_BYTES_MAX
        if not batch or full:
            await send()
    await send()
    return status


def position_query(position: Position) -> dict[str, str]:
    value = position.value
    match position.by:
        case By.EARLIEST:
            return {"from": "earliest"}
        case By.SEQ:
            return {"from_seq": str(value)}
        case By.DLSN:
            return {"from": f"dlsn:{value}"}
        case By.TXID:
            return {"from": f"txid:{value}"}
    return {"from": f"time:{value}"}


async def read_pages(
    url: str,
    namespace: str,
    name: str,
    start: Position,
    follow: bool,
    limit: int | None,
    as_json: bool,
    out: TextIO,
) -> int:
    """Prints records from the read proxy's pages; without --follow, stops at the first page
    that stays empty for END_WAIT_MS (the end of the stream as it is then)."""
    base = f"{url}/v1/namespaces/{namespace}/streams/{name}/records"
    query = position_query(start)
    printed = 0
    timeout = aiohttp.ClientTimeout(total=FOLLOW_WAIT_MS / 1000 + 30)
    async with operator_session(timeout) as http:
        while limit is None or printed < limit:
            page_size = READ_PAGE if limit is None else min(READ_PAGE, limit - printed)
            wait_ms = FOLLOW_WAIT_MS if follow else END_WAIT_MS
            params = {**query, "max": str(page_size), "wait_ms": str(wait_ms)}
            async with http.get(base, params=params) as answer:
                body = await answer.json(content_type=None)
                if answer.status != 200:
                    raise proxy_error(body, answer.status, f"GET {base}")
            records = body["records"]
            for record in records:
                out.write(_line(record, as_json))
            out.flush()
            printed += len(records)
            if body["next_seq"] is not None:
                query = {"from_seq": str(body["next_seq"])}
            if not records and not follow:
                break
    return 0


def _line(record: dict[str, Any], as_json: bool) -> str:
    if as_json:
        body = {k: record[k] for k in ("dlsn", "txid", "seq") if k in record}
        for key in ("payload", "payload_b64"):
            if key in record:
                body[key] = record[key]
        return json.dumps(body) + "\n"
    if "payload" in record:
        return str(record["payload"]) + "\n"
    return base64.b64decode(record["payload_b64"]).decode(errors="replace") + "\n"
