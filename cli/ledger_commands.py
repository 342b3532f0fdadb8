"""`globelog ledger show|audit ID...`: printing a ledger's metadata and its placement audit."""

from __future__ import annotations

import json
from typing import Any


def print_audit(reports: list[dict[str, Any]], as_json: bool) -> None:
    if as_json:
        print(json.dumps(reports, indent=1, sort_keys=True))
        return
    for entry in reports:
        print(
            f"ledger {entry['ledger_id']} ({entry['state']}, last entry {entry['last_entry_id']}, "
            f"min_regions_for_durability={entry['min_regions_for_durability']})"
        )
        for segment in entry["audit"]:
            print(f"  from entry {segment['first_entry_id']}: {segment['text']}")
