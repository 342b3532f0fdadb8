"""A simulated bookie: what a BookKeeper bookie keeps of each ledger and how it answers.

The protocol's outcomes without its bytes: an add stores an entry (with the LAC and length
its header carries) unless the ledger is fenced and the add is not a recovery add; a read
with the fence flag fences the ledger first; a read of the last entry answers with the
highest entry held. Entries survive a restart (the journal is synced before an add is
answered). tests/contract/test_bookie_contract.py runs the same cases against this and a
real bookie (BookKeeper 4.17 with its default SortedLedgerStorage), which settled these
details:

- A fencing read of a ledger the bookie never held answers NO_SUCH_ENTRY, not
  NO_SUCH_LEDGER: the fence creates the ledger there, fenced and empty, so later reads say
  NO_SUCH_ENTRY too and a zombie writer's first add is refused FENCED.
- A recovery add neither needs nor sets a fence; it is stored on any ledger.
- An entry added again is acknowledged and the first copy stays, whatever the second one
  carries (seen for a plain and for a recovery re-add): the bookie reads its entry log
  before its memtable, and its memtable keeps the first copy of a key. Only once the memtable
  holding the second copy is flushed (64 MB of adds, or a checkpoint) may a real bookie
  answer with the newer one. globelog's resends and recovery re-adds carry the same payload
  and length (only the header's LAC may differ), so either copy serves a reader.

`read_only` stands for a bookie out of disk space: it refuses every add and still serves
reads. A real 4.17 bookie that is read-only but keeps room for high-priority writes (put
read-only by an operator, or just past its usage threshold) still accepts recovery adds,
which are sent at high priority. The contract does not cover read-only bookies: it cannot
turn the shared real one read-only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ledger.machines.signals import BookieFailure


@dataclass(frozen=True, slots=True)
class StoredEntry:
    lac: int  # the writer's LAC when it sent the entry
    length: int  # the ledger's length through this entry
    body: Any  # the payload (the simulation may keep any value)


@dataclass(slots=True)
class _Ledger:
    entries: dict[int, StoredEntry] = field(default_factory=dict)
    fenced: bool = False
    lac: int = -1  # the highest LAC an entry or an explicit LAC carried here
    explicit_lac: Any = None  # the last explicit-LAC packet written


class SimBookie:
    def __init__(self, name: str, *, read_only: bool = False) -> None:
        self.name = name
        self.read_only = read_only
        self._ledgers: dict[int, _Ledger] = {}

    def add(
        self, ledger_id: int, entry_id: int, entry: StoredEntry, *, recovery: bool = False
    ) -> BookieFailure | None:
        """Stores the entry; None, or why it was refused. An entry added again is accepted
        and the first copy stays (as a real bookie answers)."""
        if self.read_only:
            return BookieFailure.READ_ONLY
        ledger = self._ledgers.setdefault(ledger_id, _Ledger())
        if ledger.fenced and not recovery:
            return BookieFailure.FENCED
        ledger.entries.setdefault(entry_id, entry)
        ledger.lac = max(ledger.lac, entry.lac)
        return None

    def write_lac(self, ledger_id: int, lac: int, packet: Any) -> BookieFailure | None:
        """Stores an explicit LAC (refused on a fenced ledger, as an add is)."""
        if self.read_only:
            return BookieFailure.READ_ONLY
        ledger = self._ledgers.setdefault(ledger_id, _Ledger())
        if ledger.fenced:
            return BookieFailure.FENCED
        ledger.explicit_lac = packet
        ledger.lac = max(ledger.lac, lac)
        return None

    def lac(self, ledger_id: int) -> int | None:
        """The highest LAC the bookie learnt of the ledger; None if it holds nothing of it."""
        ledger = self._ledgers.get(ledger_id)
        return None if ledger is None else ledger.lac

    def explicit_lac(self, ledger_id: int) -> Any:
        ledger = self._ledgers.get(ledger_id)
        return None if ledger is None else ledger.explicit_lac

    def read(
        self, ledger_id: int, entry_id: int, *, fence: bool = False
    ) -> StoredEntry | BookieFailure:
        """One entry. `fence` fences the ledger first (a bookie that never saw the ledger
        then holds it, fenced and empty, and answers NO_SUCH_ENTRY)."""
        ledger = self._fence(ledger_id) if fence else self._ledgers.get(ledger_id)
        if ledger is None:
            return BookieFailure.NO_SUCH_LEDGER
        found = ledger.entries.get(entry_id)
        return BookieFailure.NO_SUCH_ENTRY if found is None else found

    def read_last(
        self, ledger_id: int, *, fence: bool = False
    ) -> tuple[int, StoredEntry] | BookieFailure:
        """The highest entry held, with its id (what recovery's fencing LAC read asks for);
        NO_SUCH_ENTRY for a ledger held without entries (fenced before any add)."""
        ledger = self._fence(ledger_id) if fence else self._ledgers.get(ledger_id)
        if ledger is None:
            return BookieFailure.NO_SUCH_LEDGER
        if not ledger.entries:
            return BookieFailure.NO_SUCH_ENTRY
        last = max(ledger.entries)
        return last, ledger.entries[last]

    def held(self, ledger_id: int) -> dict[int, StoredEntry]:
        """Every entry held of the ledger (a copy), for models and audits."""
        ledger = self._ledgers.get(ledger_id)
        return {} if ledger is None else dict(ledger.entries)

    def is_fenced(self, ledger_id: int) -> bool:
        ledger = self._ledgers.get(ledger_id)
        return ledger is not None and ledger.fenced

    def holds(self, ledger_id: int, entry_id: int) -> StoredEntry | None:
        """The copy held, for audits (no fencing, no answer codes)."""
        ledger = self._ledgers.get(ledger_id)
        return None if ledger is None else ledger.entries.get(entry_id)

    def _fence(self, ledger_id: int) -> _Ledger:
        ledger = self._ledgers.setdefault(ledger_id, _Ledger())
        ledger.fenced = True
        return ledger
