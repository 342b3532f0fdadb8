"""Every error answer a proxy can give, as docs/http-api.md's error table states it.

Each code has one HTTP status, whether the same request may be sent again (`retriable`), and
what the caller knows of the request's effect (`outcome`):

    not_applied   definite: the request changed nothing (for a write: nothing of it was
                  written). Only answered when the proxy knows it.
    unknown       indefinite: it may have taken effect (a write may have been appended and
                  may be read later). An idempotent write retried is answered with where it
                  landed, if it did; a plain write retried may land twice.

A test (tests/unit/region/test_error_table.py) holds this table, docs/http-api.md and every
error class of the code to each other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# Every answer of a write proxy names the proxy (name@region) in this header: a client whose
# later request that proxy leaves unanswered names it to another as `unreachable_owner`.
PROXY_HEADER = "Globelog-Proxy"

Outcome = Literal["not_applied", "unknown"]
NOT_APPLIED: Outcome = "not_applied"
UNKNOWN: Outcome = "unknown"


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    retriable: bool
    outcome: Outcome


def _codes(status: int, retriable: bool, outcome: Outcome, *codes: str) -> dict[str, Answer]:
    return {code: Answer(status, retriable, outcome) for code in codes}


ANSWERS: dict[str, Answer] = {
    **_codes(400, False, NOT_APPLIED, "bad_request", "invalid_dlsn", "invalid_stream_name"),
    **_codes(400, False, NOT_APPLIED, "invalid_record", "txid_out_of_order"),
    **_codes(401, False, NOT_APPLIED, "unauthenticated"),
    **_codes(403, False, NOT_APPLIED, "forbidden"),
    **_codes(404, False, NOT_APPLIED, "stream_not_found", "not_found"),
    **_codes(405, False, NOT_APPLIED, "method_not_allowed"),
    **_codes(408, True, NOT_APPLIED, "request_timeout"),
    **_codes(409, False, NOT_APPLIED, "stream_exists", "end_of_stream", "seq_mismatch"),
    **_codes(409, False, NOT_APPLIED, "session_fenced", "producer_seq_stale"),
    **_codes(409, True, NOT_APPLIED, "owner_exists", "producer_seq_in_flight"),
    **_codes(410, False, NOT_APPLIED, "position_truncated"),
    **_codes(413, False, NOT_APPLIED, "record_too_large", "request_too_large"),
    **_codes(429, True, NOT_APPLIED, "over_capacity", "quota_exceeded"),
    **_codes(500, False, NOT_APPLIED, "entry_format_invalid", "segment_metadata_invalid"),
    **_codes(500, False, UNKNOWN, "internal"),
    **_codes(503, True, NOT_APPLIED, "owner_fenced", "write_failed", "writer_closed"),
    **_codes(503, True, NOT_APPLIED, "owner_unreachable", "metadata_unavailable"),
    **_codes(503, True, NOT_APPLIED, "metadata_session_expired", "storage_unavailable"),
    **_codes(503, True, NOT_APPLIED, "read_timeout"),
    **_codes(503, False, NOT_APPLIED, "data_loss"),
    **_codes(503, True, UNKNOWN, "outcome_unknown"),
}
# A proxy's redirect (307) is not an error: `{"code": "redirect", "owner", "location"}`.
REDIRECT_CODE = "redirect"
# Codes a client raises itself, for no answer or none it can use (never answered by a proxy).
CLIENT_CODES = frozenset(
    {
        "proxy_unreachable",  # no answer: refused, reset, timed out, not JSON
        "redirect_loop",  # more redirects than the client follows
        "read_answer_invalid",  # a page that is not the documented one (localcluster/tails.py)
    }
)


def answer_of(code: str) -> Answer | None:
    return ANSWERS.get(code)
