"""Deliberately broken variants of the pure machines, for showing that the simulation and
its checker catch what each breaks. Test code only: nothing in the product imports this."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from ledger.machines.add_state import AddState
from ledger.machines.read_lac_state import SendReadLac
from ledger.machines.read_state import SendRead
from ledger.machines.recovery_state import RecoveryState
from verify.sim.proxy import Machines


class AcksAtOneCopy(AddState):
    """A writer that acknowledges an entry once one bookie holds it (ack quorum 1)."""

    def __init__(
        self, ensemble: Sequence[str], write_quorum: int, ack_quorum: int, **kw: Any
    ) -> None:
        super().__init__(ensemble, write_quorum, 1, **kw)


class SkipsFencing(RecoveryState):
    """A recovery whose LAC and entry reads do not fence the ledger: the former owner's
    adds keep landing after the new owner closed the ledger."""

    def take_actions(self) -> list[Any]:
        return [
            dataclasses.replace(a, fence=False) if isinstance(a, SendReadLac | SendRead) else a
            for a in super().take_actions()
        ]


BROKEN = {
    "acks-at-one-copy": Machines(add_state=AcksAtOneCopy),
    "skips-fencing": Machines(recovery_state=SkipsFencing),
    "forgets-producers": Machines(forgets_producers=True),
}
