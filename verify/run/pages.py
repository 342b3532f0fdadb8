"""The pages of one stream as an HTTP client of a read proxy gets them, each asked for where the
last one ended, with every answer that is not a page raised as a GlobelogError (a failover run
records or judges each)."""

from __future__ import annotations

import asyncio
import base64
import json
from dataclasses import dataclass
from typing import Any

import aiohttp

from core.dlsn import DLSN
from core.errors import GlobelogError, ProxyError, ProxyUnreachableError, answered_error

POLL_WAIT_MS = 1000


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
