"""The error table is one truth in three places: core/answers.py (what the proxies answer),
docs/http-api.md's "Errors" table (what users read), and the error classes of the code (what
can be raised under a proxy). Every class is answered with a code of the table, and none falls
through to `internal` unless it is listed below as one a proxy never raises."""

from __future__ import annotations

import importlib
import json
import pkgutil
import re
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from core import errors
from core.answers import ANSWERS, Answer
from ledger import errors as ledger_errors
from placement import errors as placement_errors
from region.http_errors import (
    answered_code,
    error_middleware,
    error_response,
    http_error_response,
)
from region.observability.telemetry import ERROR_CODE, error_code

pytestmark = pytest.mark.unit

DOC = Path(__file__).resolve().parents[3] / "docs" / "http-api.md"
# The packages whose code runs inside a proxy: any error they define may reach an answer.
SERVING_PACKAGES = ("core", "ledger", "placement", "global_meta", "writer", "reader", "region")
# Classes a proxy never raises for a request (configuration, the local launcher, base classes,
# the client's own): answered `internal` if one ever did.
NEVER_ANSWERED = {
    errors.GlobelogError,
    errors.ConfigError,
    errors.TopologyError,
    errors.QuorumError,
    placement_errors.QuorumSettingsError,
    errors.ClusterError,
    errors.StreamError,
    errors.ServiceError,
    errors.ArchiveCheckError,
    errors.ProxyError,
    errors.ProxyUnreachableError,
}
ROW = re.compile(r"^\| (\d{3}) \| `([a-z_]+)` \| (yes|no) \| (not_applied|unknown) \| .+ \|$")


def documented(text: str) -> dict[str, Answer]:
    """The rows of the "Errors" table of http-api.md's text: code -> its answer."""
    section = text.split("\n## Errors\n", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, Answer] = {}
    for line in section.splitlines():
        match = ROW.match(line)
        if match:
            status, code, retriable, outcome = match.groups()
            assert code not in rows, f"{code} is in the table twice"
            rows[code] = Answer(int(status), retriable == "yes", outcome)  # type: ignore[arg-type]
    return rows


def differences(table: dict[str, Answer], docs: dict[str, Answer]) -> list[str]:
    found = [f"{code}: answered, not in the docs" for code in sorted(set(table) - set(docs))]
    found += [f"{code}: in the docs, never answered" for code in sorted(set(docs) - set(table))]
    found += [
        f"{code}: answered {table[code]}, documented {docs[code]}"
        for code in sorted(set(table) & set(docs))
        if table[code] != docs[code]
    ]
    return found


def error_classes() -> set[type[errors.GlobelogError]]:
    for package in SERVING_PACKAGES:
        module = importlib.import_module(package)
        for info in pkgutil.walk_packages(module.__path__, f"{package}."):
            importlib.import_module(info.name)
    found: set[type[errors.GlobelogError]] = set()
    pending: list[type[errors.GlobelogError]] = [errors.GlobelogError]
    while pending:
        cls = pending.pop()
        found.add(cls)
        pending += cls.__subclasses__()
    return {c for c in found if c.__module__.split(".")[0] in SERVING_PACKAGES}


def test_the_docs_table_is_the_table_the_proxies_answer_from() -> None:
    docs = documented(DOC.read_text())
    assert len(docs) >= 30, "the table was not found in http-api.md"
    assert differences(ANSWERS, docs) == []


def test_a_code_removed_from_the_docs_is_found() -> None:
    text = DOC.read_text()
    without = "\n".join(
        line for line in text.splitlines() if "| `metadata_session_expired` |" not in line
    )
    assert differences(ANSWERS, documented(without)) == [
        "metadata_session_expired: answered, not in the docs"
    ]
    changed = text.replace(
        "| 503 | `outcome_unknown` | yes | unknown |",
        "| 503 | `outcome_unknown` | yes | not_applied |",
    )
    assert differences(ANSWERS, documented(changed)) == [
        "outcome_unknown: answered Answer(status=503, retriable=True, outcome='unknown'), "
        "documented Answer(status=503, retriable=True, outcome='not_applied')"
    ]


def test_every_error_class_is_answered_with_a_documented_code() -> None:
    classes = error_classes()
    assert ledger_errors.LedgerRecoveryError in classes and errors.SessionExpiredError in classes
    internal = set()
    for cls in classes:
        code = answered_code(_instance(cls))
        assert code in ANSWERS, f"{cls.__name__} is answered with {code!r}, not in the table"
        if code == errors.GlobelogError.code:
            internal.add(cls)
    assert internal == NEVER_ANSWERED, (
        "new error classes must be answered with a documented code (or listed as never "
        f"answered): {sorted(c.__name__ for c in internal ^ NEVER_ANSWERED)}"
    )


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (errors.SessionExpiredError("session gone"), "metadata_session_expired"),
        (errors.BadVersionError("lost a race"), "metadata_unavailable"),
        (ledger_errors.LedgerRecoveryError("no quorum answered"), "storage_unavailable"),
        (
            placement_errors.NotEnoughBookiesError("ensemble", "2 regions", "us-east: 0"),
            "storage_unavailable",
        ),
        (ledger_errors.BookieTimeoutError("bk-1"), "storage_unavailable"),
        (errors.OutcomeUnknownError("may have", "owner_fenced"), "outcome_unknown"),
    ],
)
def test_operating_conditions_are_answered_as_documented_503s(
    error: errors.GlobelogError, code: str
) -> None:
    answer = error_response(error)
    body = json.loads(answer.body)  # type: ignore[arg-type]
    assert answer.status == 503 and body["code"] == code and body["retriable"] is True
    assert body["outcome"] == ANSWERS[code].outcome
    if code != error.code:
        assert body["message"].startswith(f"{error.code}: "), "the message keeps the cause"
    if code == "outcome_unknown":
        assert body["cause"] == "owner_fenced" and body["outcome"] == "unknown"


@pytest.mark.parametrize(
    "refusal",
    [
        web.HTTPNotFound(),
        web.HTTPMethodNotAllowed("PATCH", ["GET"]),
        web.HTTPRequestEntityTooLarge(max_size=10, actual_size=20),
        web.HTTPBadRequest(),
    ],
)
def test_the_http_layers_own_refusals_are_in_the_table(refusal: web.HTTPException) -> None:
    answer = http_error_response(refusal, "/v1/x")
    body = json.loads(answer.body)  # type: ignore[arg-type]
    assert body["code"] in ANSWERS and answer.status == ANSWERS[body["code"]].status
    assert body["outcome"] == "not_applied"


def _instance(cls: type[errors.GlobelogError]) -> errors.GlobelogError:
    """An instance of any error class, whatever its constructor wants."""
    error = cls.__new__(cls)
    Exception.__init__(error, f"a {cls.__name__}")
    return error


async def test_a_bug_in_a_handler_is_answered_as_json_internal_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def broken(request: web.Request) -> web.Response:
        raise RuntimeError("a bug")

    app = web.Application(middlewares=[error_middleware])
    app.router.add_get("/v1/broken", broken)
    async with TestClient(TestServer(app, host="127.0.0.1")) as client:
        answer = await client.get("/v1/broken")
        body = await answer.json()
    assert answer.status == 500 and body["code"] == "internal"
    assert body["outcome"] == "unknown" and body["retriable"] is False
    assert body["message"] == "RuntimeError: a bug"
    assert any("GET /v1/broken failed" in r.getMessage() and r.exc_info for r in caplog.records)


def test_an_error_answer_carries_its_code_for_the_middlewares_that_count_it() -> None:
    """The metrics and tracing middlewares read an answer's code as it was made, not by
    parsing its body again (a refusal flood is thousands of answers a second)."""
    for err in (
        errors.QuotaExceededError("too fast", retry_after_s=1.0),
        errors.BadRequestError("x"),
    ):
        answer = error_response(err)
        assert answer[ERROR_CODE] == err.code == error_code(answer)
        assert json.loads(answer.body)["code"] == err.code  # type: ignore[arg-type]
    bare = web.Response(status=400, body=b'{"code": "bad_request"}')
    assert error_code(bare) == "bad_request", "an answer made elsewhere is read from its body"
    assert error_code(web.Response(status=400, body=b"not json")) == "unknown"
