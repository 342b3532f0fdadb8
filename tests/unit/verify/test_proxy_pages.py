"""A read proxy's pages as the failover run takes them: a page moves the next request on; an
error answered is raised as the library's class for its code (or with its code, retriable flag
and status when no class has it); no answer is unreachable
(retriable); an answer that is not the documented one is its own error, never a page."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import pytest

from core.dlsn import DLSN
from core.errors import (
    MetadataUnavailableError,
    ProxyError,
    ProxyUnreachableError,
    StreamNotFoundError,
)
from verify.run.pages import PagedRecord, ProxyPages, ReadAnswerInvalidError

pytestmark = pytest.mark.unit


class Answer:
    def __init__(self, status: int, text: str) -> None:
        self.status, self._text = status, text

    async def __aenter__(self) -> Answer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    async def text(self) -> str:
        return self._text


class Session:
    """Answers each GET from a script (an Answer, or an exception to raise), noting queries."""

    def __init__(self, *script: Answer | BaseException) -> None:
        self.script = list(script)
        self.queries: list[dict[str, str]] = []

    def get(self, url: str, params: dict[str, str], **kwargs: Any) -> Answer:
        self.queries.append(params)
        step = self.script.pop(0)
        if isinstance(step, BaseException):
            raise step
        return step


def pages(session: Session) -> ProxyPages:
    return ProxyPages(session, "http://127.0.0.1:1", "ns", "s0")  # type: ignore[arg-type]


def page(*records: tuple[int, str, str]) -> Answer:
    body = [{"seq": s, "dlsn": d, "txid": s, "payload": p} for s, d, p in records]
    return Answer(200, json.dumps({"records": body, "next_seq": None}))


async def test_pages_follow_on_from_where_the_last_one_ended() -> None:
    session = Session(page((0, "1.0.0", "7"), (1, "1.1.0", "8")), page())
    reader = pages(session)
    assert await reader.next() == [
        PagedRecord(0, DLSN(1, 0, 0), b"7"),
        PagedRecord(1, DLSN(1, 1, 0), b"8"),
    ]
    assert await reader.next(wait_ms=200) == []
    assert [q["from_seq"] for q in session.queries] == ["0", "2"]
    assert session.queries[1]["wait_ms"] == "200" and reader.next_seq == 2


async def test_an_error_answered_is_raised_as_the_class_of_its_code_with_its_flag() -> None:
    body = {"code": "metadata_unavailable", "message": "no session", "retriable": True}
    with pytest.raises(MetadataUnavailableError) as refused:
        await pages(Session(Answer(503, json.dumps(body)))).next()
    assert refused.value.retriable and str(refused.value) == "no session"
    assert "from_seq 0 with HTTP 503" in refused.value.__notes__[0]
    body = {"code": "stream_not_found", "message": "no stream", "retriable": False}
    with pytest.raises(StreamNotFoundError):
        await pages(Session(Answer(404, json.dumps(body)))).next()


async def test_an_error_of_a_code_no_class_has_keeps_its_code_flag_and_status() -> None:
    body = {"code": "method_not_allowed", "message": "Method Not Allowed", "retriable": False}
    with pytest.raises(ProxyError) as refused:
        await pages(Session(Answer(405, json.dumps(body)))).next()
    assert (refused.value.code, refused.value.retriable, refused.value.status) == (
        "method_not_allowed",
        False,
        405,
    )


async def test_no_answer_is_a_retriable_unreachable_proxy() -> None:
    session = Session(aiohttp.ClientConnectionError("refused"), TimeoutError())
    reader = pages(session)
    for _ in range(2):
        with pytest.raises(ProxyUnreachableError) as unreachable:
            await reader.next()
        assert unreachable.value.retriable and reader.next_seq == 0


@pytest.mark.parametrize(
    "answer",
    [
        Answer(500, "500 Internal Server Error"),  # aiohttp's own, for a handler's bug
        Answer(200, json.dumps({"records": [{"seq": 0, "dlsn": "1.x"}]})),
        Answer(200, "[]"),
    ],
)
async def test_an_answer_that_is_not_documented_is_never_taken_for_a_page(answer: Answer) -> None:
    with pytest.raises(ReadAnswerInvalidError):
        await pages(Session(answer)).next()
