"""Failover runs (`globelog failover run --out DIR`) the console shows: each directory under
the runs folder that holds a report.json, with its timeline plot (faults shaded)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from core.errors import NotFoundError

RUNS_LISTED_MAX = 200
REPORT_BYTES_MAX = 4 * 1024 * 1024
RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


class FailoverRuns:
    def __init__(self, folder: Path | None) -> None:
        self.folder = folder

    def _dirs(self) -> list[Path]:
        if self.folder is None or not self.folder.is_dir():
            return []
        found = [d for d in self.folder.iterdir() if (d / "report.json").is_file()]
        return sorted(found, key=lambda d: d.stat().st_mtime, reverse=True)[:RUNS_LISTED_MAX]

    def listing(self) -> list[dict[str, Any]]:
        rows = []
        for folder in self._dirs():
            if not RUN_NAME.fullmatch(folder.name):
                continue  # not a name a run page could be asked for
            report = self._report(folder)
            row: dict[str, Any] = {
                "name": folder.name,
                "finished_ms": int((folder / "report.json").stat().st_mtime * 1000),
                "valid": report.get("valid"),
            }
            try:
                row["operations"] = sum(report.get("operations", {}).values())
                row["faults"] = len(report.get("faults", []))
                row["anomalies"] = report.get(
                    "anomalies_total", sum(report.get("counts", {}).values())
                )
            except (TypeError, AttributeError, ValueError):  # a report of another shape
                row.update(operations=None, faults=None, anomalies=report.get("error", "?"))
            rows.append(row)
        return rows

    def run(self, name: str) -> dict[str, Any]:
        folder = self._folder(name)
        return {**self._report(folder), "name": name}

    def timeline(self, name: str) -> Path:
        path = self._folder(name) / "timeline.png"
        if not path.is_file():
            raise NotFoundError(f"failover run {name!r} has no timeline.png")
        return path

    def _folder(self, name: str) -> Path:
        if not RUN_NAME.fullmatch(name) or self.folder is None:
            raise NotFoundError(f"no failover run {name!r:.140}")
        folder = self.folder / name
        if not (folder / "report.json").is_file():
            raise NotFoundError(f"no failover run {name!r} under {self.folder}")
        return folder

    @staticmethod
    def _report(folder: Path) -> dict[str, Any]:
        path = folder / "report.json"
        if path.stat().st_size > REPORT_BYTES_MAX:
            return {"error": f"{path}: over {REPORT_BYTES_MAX} bytes"}
        try:
            found = json.loads(path.read_text())
        except ValueError as err:
            return {"error": f"{path}: not JSON: {err}"}
        if not isinstance(found, dict):
            return {"error": f"{path}: a JSON {type(found).__name__}, not an object"}
        return found
