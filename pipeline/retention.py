"""Retention over a namespace's streams, archive-aware (`globelog spark retention`).

With an archive in the topology, a segment past the TTL loses its ledger only once it is
archived (the archive job runs first), and readers read it from the archive afterwards;
without one, expired segments and their ledgers are deleted (writer/admin.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from core.topology_loader import load_topology
from reader.session import read_session
from writer.admin import apply_retention


async def expire_streams(
    topology_path: Path,
    region: str,
    namespace: str,
    streams: list[str],
    ttl_s: float,
    dry_run: bool,
) -> list[dict[str, Any]]:
    """Applies the TTL to each stream; what each one lost or kept, and why."""
    topology = load_topology(topology_path)
    archive = topology.archive_uri is not None
    results = []
    async with read_session(topology, region, namespace) as session:
        for stream in streams:
            result = await apply_retention(
                session.streams, session.ledgers, stream, ttl_s, dry_run=dry_run,
                archive_required=archive,
            )  # fmt: skip
            results.append(
                {
                    "stream": stream,
                    "archive_required": archive,
                    "dry_run": dry_run,
                    "expired_segments": [s.sequence for s in result.expired],
                    "ledgers_deleted": [] if dry_run else [s.ledger_id for s in result.expired],
                    "segments_kept": result.kept,
                    "waiting_for_archive": result.waiting_for_archive,
                }
            )
    return results
