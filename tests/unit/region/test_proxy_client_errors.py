"""An error a proxy answers is raised by the client as the library's class for its code, so
callers catch classes; a code no class has keeps its code, flag and status (ProxyError)."""

from __future__ import annotations

import pytest

from core import errors
from core.answers import ANSWERS
from region.client import ProxyError, proxy_error

pytestmark = pytest.mark.unit


# Codes of the table the client raises as a ProxyError: aiohttp's refusals, a bug, and data
# loss (whose class carries the lost range, which an answer names only in its message).
WITHOUT_CLASS = {"method_not_allowed", "internal", "data_loss"}


def test_every_code_a_proxy_answers_has_its_class() -> None:
    assert set(ANSWERS) - WITHOUT_CLASS == set(errors.ERROR_BY_CODE)
    for code, cls in errors.ERROR_BY_CODE.items():
        assert cls.code == code


@pytest.mark.parametrize("code", sorted(errors.ERROR_BY_CODE))
def test_a_known_code_is_raised_as_its_class_with_the_proxys_retriable_flag(code: str) -> None:
    retriable = ANSWERS[code].retriable if code in ANSWERS else errors.ERROR_BY_CODE[code].retriable
    body = {"code": code, "message": f"about {code}", "retriable": retriable}
    error = proxy_error(body, 409, "POST http://127.0.0.1:1/v1/namespaces/n/streams/s/records")
    assert type(error) is errors.ERROR_BY_CODE[code]
    assert str(error) == f"about {code}" and error.retriable is retriable
    assert error.__notes__ == [
        "answered to POST http://127.0.0.1:1/v1/namespaces/n/streams/s/records with HTTP 409"
    ]


def test_a_fenced_owner_is_retriable_at_the_proxy_but_not_for_the_library_class() -> None:
    error = proxy_error({"code": "owner_fenced", "message": "m", "retriable": True}, 503, "GET x")
    assert isinstance(error, errors.OwnerFencedError) and error.retriable
    assert not errors.OwnerFencedError.retriable, "the instance's flag, not the class's"


def test_an_unknown_code_keeps_its_code_flag_and_status() -> None:
    error = proxy_error({"code": "method_not_allowed", "message": "no"}, 405, "PATCH x")
    assert isinstance(error, ProxyError)
    assert (error.code, error.retriable, error.status) == ("method_not_allowed", False, 405)
    assert str(error) == "[method_not_allowed] no (HTTP 405)"
