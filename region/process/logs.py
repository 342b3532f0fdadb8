"""Structured logs of the services: one JSON object per line, with stable keys.

    {"ts": "2026-11-24T16:04:44.206Z", "level": "info", "logger": "region.ownership",
     "msg": "took ownership of ns/orders (session 17955...)", "service": "write-proxy",
     "proxy": "wp-eu-west", "region": "eu-west"}

plus "exc" (the formatted traceback) when a record carries an exception. Keys are never
renamed; new ones may be added. `--log-format text` keeps the human form.
"""

from __future__ import annotations

import json
import logging
import time


class JsonLines(logging.Formatter):
    def __init__(self, **fixed: str) -> None:
        super().__init__()
        self._fixed = fixed

    def format(self, record: logging.LogRecord) -> str:
        seconds = time.gmtime(record.created)
        millis = int(record.created * 1000) % 1000
        line: dict[str, object] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", seconds) + f".{millis:03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
            **self._fixed,
        }
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False)


def configure(log_format: str, **fixed: str) -> None:
    """Sends INFO and above to stderr as JSON lines (`json`) or plain text (`text`)."""
    handler = logging.StreamHandler()
    if log_format == "json":
        handler.setFormatter(JsonLines(**fixed))
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
