"""The services' structured log lines: one JSON object, stable keys, tracebacks kept."""

from __future__ import annotations

import json
import logging
import sys

from region.process.logs import JsonLines


def test_a_log_line_is_one_json_object_with_the_stable_keys() -> None:
    formatter = JsonLines(service="write-proxy", proxy="wp-us-east", region="us-east")
    record = logging.LogRecord("region.ownership", logging.INFO, "x", 1, "took %s", ("s",), None)
    record.created = 0.25
    line = json.loads(formatter.format(record))
    assert line == {
        "ts": "1970-01-01T00:00:00.250Z",
        "level": "info",
        "logger": "region.ownership",
        "msg": "took s",
        "service": "write-proxy",
        "proxy": "wp-us-east",
        "region": "us-east",
    }


def test_an_exception_travels_in_its_own_key_on_the_same_line() -> None:
    try:
        raise ValueError("boom\nsecond line")
    except ValueError:
        record = logging.LogRecord("x", logging.ERROR, "x", 1, "failed", (), sys.exc_info())
    text = JsonLines().format(record)
    assert "\n" not in text
    assert "ValueError: boom" in json.loads(text)["exc"]
