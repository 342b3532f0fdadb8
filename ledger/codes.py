"""The numbers of BookKeeper's v3 bookie protocol: versions, operations, status codes and flags.

Values are those of bookkeeper-proto/src/main/proto/BookkeeperProtocol.proto (BookKeeper 4.17);
they are wire constants and must never be renumbered.
"""

from __future__ import annotations

import enum


class ProtocolVersion(enum.IntEnum):
    VERSION_ONE = 1
    VERSION_TWO = 2
    VERSION_THREE = 3


class OperationType(enum.IntEnum):
    READ_ENTRY = 1
    ADD_ENTRY = 2
    RANGE_READ_ENTRY = 3  # declared by BookKeeper, never implemented by bookies
    RANGE_ADD_ENTRY = 4  # declared by BookKeeper, never implemented by bookies
    AUTH = 5
    WRITE_LAC = 6
    READ_LAC = 7
    GET_BOOKIE_INFO = 8
    START_TLS = 9
    FORCE_LEDGER = 10
    GET_LIST_OF_ENTRIES_OF_LEDGER = 11
    BATCH_READ_ENTRY = 12


class StatusCode(enum.IntEnum):
    EOK = 0
    ENOLEDGER = 402  # the bookie has no such ledger
    ENOENTRY = 403  # the bookie has the ledger but not that entry
    EBADREQ = 404  # malformed or unsupported request
    EIO = 501  # bookie-side I/O failure
    EUA = 502  # unauthorized: wrong master key, or not authenticated
    EBADVERSION = 503  # request header version is not VERSION_THREE
    EFENCED = 504  # the ledger is fenced: normal adds are refused
    EREADONLY = 505  # the bookie is read-only: adds and explicit LACs are refused
    ETOOMANYREQUESTS = 506  # the bookie shed the request under load
    EUNKNOWNLEDGERSTATE = 507  # the bookie lost data of this ledger and cannot answer yet


class ReadFlag(enum.IntEnum):
    """ReadRequest.Flag: one flag at most per read."""

    FENCE_LEDGER = 1  # fence the ledger before answering (needs the master key)
    ENTRY_PIGGYBACK = 2  # long-poll LAC read that also returns entry previousLAC+1


class AddFlag(enum.IntEnum):
    """AddRequest.Flag."""

    RECOVERY_ADD = 1  # ledger recovery re-adds an entry; the bookie skips the fence check


class WriteFlag(enum.IntFlag):
    """AddRequest.writeFlags bits (client api WriteFlag)."""

    DEFERRED_SYNC = 0x1  # ack after the journal write, before fsync; FORCE_LEDGER syncs later


class BookieInfoFlag(enum.IntFlag):
    """GetBookieInfoRequest.Flags: which figures to report."""

    TOTAL_DISK_CAPACITY = 0x1
    FREE_DISK_SPACE = 0x2


# The entry id a ReadRequest names to ask for "the last entry this bookie has"
# (BookieProtocol.LAST_ADD_CONFIRMED).
LAST_ADD_CONFIRMED = -1
# The entry id of "no entry yet": LAC of an empty ledger, lastEntryId of an empty closed ledger.
INVALID_ENTRY_ID = -1

# The plugin name a bookie with authentication disabled (the default) answers AUTH with.
AUTH_DISABLED_PLUGIN_NAME = "AuthDisabledPlugin"
