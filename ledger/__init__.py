"""globelog's BookKeeper ledger client: wire codecs, connections, pure machines, drivers.

Sans-IO codecs (bytes in, bytes out):
  codes, errors, protobuf, messages, message_codec, frames, entry, metadata
Pure state machines (events in, actions out; time is an input; no IO):
  add_state (+ add_events), recovery_state (+ recovery_events), read_lac_state, read_state,
  signals (what the machines share), backoff, inflight
Asyncio drivers (sockets and ZooKeeper):
  connection (one pipelined connection), bookie_pool and bookie_client (per-bookie pool),
  slots, connection_errors, metadata_store (ledger metadata in BookKeeper's ZooKeeper layout),
  ping (one-shot round trip)

docs/wire-protocol.md describes the protocol facts the codecs implement and where they come from.

Other packages import only what `__all__` names, from `ledger` itself (tests/unit/test_layers.py
checks it), so the modules inside can be reorganised without touching their callers.
"""

from ledger.bookie_client import BookieClient
from ledger.client import LedgerClient
from ledger.cluster_init import init_cluster_metadata
from ledger.codes import INVALID_ENTRY_ID
from ledger.context import MIN_REGIONS_KEY, LedgerConfig
from ledger.entry import DigestType
from ledger.errors import NoSuchLedgerError
from ledger.handle_errors import (
    EnsembleChangeError,
    EntryMissingError,
    EntryUnavailableError,
    LedgerClosedError,
    LedgerFencedError,
    LedgerHandleError,
    LedgerInternalError,
    LedgerRecoveryError,
    LedgerRecoveryTimeoutError,
    LedgerUnauthorizedError,
    ReadBeyondLacError,
)
from ledger.metadata import LEDGERS_ROOT, Ensemble, LedgerMetadata, LedgerState
from ledger.metadata_store import (
    LedgerMetadataStore,
    NoSuchLedgerMetadataError,
    VersionedMetadata,
)
from ledger.ping import BookieUnreachableError, ping_bookie
from ledger.read_handle import LedgerReader
from ledger.write_handle import ENTRY_BYTES_MAX, LedgerWriter

__all__ = [
    "ENTRY_BYTES_MAX",
    "INVALID_ENTRY_ID",
    "LEDGERS_ROOT",
    "MIN_REGIONS_KEY",
    "BookieClient",
    "BookieUnreachableError",
    "DigestType",
    "Ensemble",
    "EnsembleChangeError",
    "EntryMissingError",
    "EntryUnavailableError",
    "LedgerClient",
    "LedgerClosedError",
    "LedgerConfig",
    "LedgerFencedError",
    "LedgerHandleError",
    "LedgerInternalError",
    "LedgerMetadata",
    "LedgerMetadataStore",
    "LedgerReader",
    "LedgerRecoveryError",
    "LedgerRecoveryTimeoutError",
    "LedgerState",
    "LedgerUnauthorizedError",
    "LedgerWriter",
    "NoSuchLedgerError",
    "NoSuchLedgerMetadataError",
    "ReadBeyondLacError",
    "VersionedMetadata",
    "init_cluster_metadata",
    "ping_bookie",
]
