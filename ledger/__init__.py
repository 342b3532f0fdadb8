"""globelog's BookKeeper ledger client. Its folders are its layers, each importing only below:

  codes.py, errors.py   the protocol's numbers, and every error class of the ledger
  codecs/               sans-IO codecs: bookie messages, frames, entries, metadata
  machines/             pure state machines: events in, actions out, time is an input
  connections/          asyncio connections to bookies, pooled per bookie id
  drivers/              handles, recovery and the client: machines run over connections

docs/wire-protocol.md describes the protocol facts the codecs implement and where they come from.

Other packages import only what `__all__` names, from `ledger` itself (tests/unit/test_layers.py
checks it, and the arrows between the folders), so the modules inside can be reorganised
without touching their callers.
"""

from ledger.codecs.entry import DigestType
from ledger.codecs.metadata import LEDGERS_ROOT, Ensemble, LedgerMetadata, LedgerState
from ledger.codecs.underreplication import (
    Layout,
    Marker,
    decode_vote,
    encode_vote,
)
from ledger.codes import INVALID_ENTRY_ID
from ledger.connections.bookie_client import BookieClient
from ledger.connections.ping import BookiePinger, ping_bookie
from ledger.drivers.audit import audit_ledgers, audit_replicas, describe_ledger
from ledger.drivers.client import LedgerClient
from ledger.drivers.cluster_init import init_cluster_metadata
from ledger.drivers.context import MIN_REGIONS_KEY, LedgerConfig
from ledger.drivers.metadata_store import LedgerMetadataStore, VersionedMetadata
from ledger.drivers.read_handle import LedgerReader
from ledger.drivers.rebuild import (
    COPY_BATCH_BYTES,
    Fragment,
    LedgerRebuild,
    Pace,
    Rebuilt,
    ReplicaGap,
    pending_copies,
    plan_fragments,
)
from ledger.drivers.rebuild.underreplication import Claim, UnderReplication
from ledger.drivers.write_handle import ENTRY_BYTES_MAX, LedgerWriter
from ledger.errors import (
    BookieUnreachableError,
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
    MarkerFormatError,
    NoSuchLedgerError,
    NoSuchLedgerMetadataError,
    ReadBeyondLacError,
)

__all__ = [
    "COPY_BATCH_BYTES",
    "ENTRY_BYTES_MAX",
    "INVALID_ENTRY_ID",
    "LEDGERS_ROOT",
    "MIN_REGIONS_KEY",
    "BookieClient",
    "BookiePinger",
    "BookieUnreachableError",
    "Claim",
    "DigestType",
    "Ensemble",
    "EnsembleChangeError",
    "EntryMissingError",
    "EntryUnavailableError",
    "Fragment",
    "Layout",
    "LedgerClient",
    "LedgerClosedError",
    "LedgerConfig",
    "LedgerFencedError",
    "LedgerHandleError",
    "LedgerInternalError",
    "LedgerMetadata",
    "LedgerMetadataStore",
    "LedgerReader",
    "LedgerRebuild",
    "LedgerRecoveryError",
    "LedgerRecoveryTimeoutError",
    "LedgerState",
    "LedgerUnauthorizedError",
    "LedgerWriter",
    "Marker",
    "MarkerFormatError",
    "NoSuchLedgerError",
    "NoSuchLedgerMetadataError",
    "Pace",
    "ReadBeyondLacError",
    "Rebuilt",
    "ReplicaGap",
    "UnderReplication",
    "VersionedMetadata",
    "audit_ledgers",
    "audit_replicas",
    "decode_vote",
    "describe_ledger",
    "encode_vote",
    "init_cluster_metadata",
    "pending_copies",
    "ping_bookie",
    "plan_fragments",
]
