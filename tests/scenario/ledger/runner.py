"""Runs golden-script commands against the ledger state machines and renders their actions.

Machines:  new-add, new-recovery, new-read-lac, new-read   (one per script)
Inputs:    submit len=N, close, state, wakeup
Events:    acked, add-failed, changed, change-failed, lac-replied, lac-failed,
           entry-read, entry-read-failed, tick now=S
After every command the machine's `validate()` runs, so each step also checks invariants.
"""

from __future__ import annotations

from typing import Any

from ledger.codecs.entry import DigestType
from ledger.codecs.metadata import Ensemble, LedgerMetadata, LedgerState
from ledger.machines.add_events import (
    AddAcked,
    AddErrorKind,
    AddFailed,
    ChangeEnsemble,
    CloseLedger,
    CompleteAdds,
    EnsembleChanged,
    EnsembleChangeFailed,
    FailAdds,
    FailClose,
    ForgetPayloads,
    SendAdd,
)
from ledger.machines.add_state import AddConfig, AddState
from ledger.machines.read_lac_state import (
    CompleteReadLac,
    FailReadLac,
    LacReadFailed,
    LacReplied,
    ReadLacState,
    SendReadLac,
)
from ledger.machines.read_state import (
    CompleteRead,
    EntryRead,
    EntryReadFailed,
    EntryReadState,
    FailRead,
    SendRead,
)
from ledger.machines.recovery_events import FailRecovery
from ledger.machines.recovery_state import RecoveryConfig, RecoveryState
from ledger.machines.signals import BookieFailure, RecordHealth, Ticked
from tests.scenario.ledger.script import Args

Machine = AddState | RecoveryState | ReadLacState | EntryReadState


def render(action: object) -> str:
    match action:
        case SendAdd():
            flags = {"recovery": action.recovery, "owed": action.owed, "last-use": action.last_use}
            flag = "".join(f" {name}" for name, on in flags.items() if on)
            return (
                f"send-add e={action.entry_id} to={action.bookie}@{action.bookie_index} "
                f"lac={action.lac} length={action.length}{flag}"
            )
        case CompleteAdds():
            span = f"{action.first_entry_id}..{action.last_entry_id}"
            keep = " keep-payloads" if action.keep_payloads else ""
            return f"complete-adds e={span} length={action.length}{keep}"
        case ForgetPayloads():
            return f"forget-payloads e={','.join(map(str, action.entry_ids))}"
        case ChangeEnsemble():
            replace = ",".join(
                f"{b}@{i}" for b, i in zip(action.bookies, action.indices, strict=True)
            )
            keep = ("" if action.persist else " in-memory") + (
                " respread" if action.respread else ""
            )
            return f"change-ensemble first={action.first_entry_id} replace={replace}{keep}"
        case FailAdds():
            entries = ",".join(map(str, action.entry_ids))
            return f"fail-adds e={entries} {action.error.kind.value}: {action.error.message}"
        case CloseLedger():
            ensembles = "".join(
                f" ensemble={e.first_entry_id}:{','.join(e.bookies)}" for e in action.ensembles
            )
            return f"close-ledger last={action.last_entry_id} length={action.length}{ensembles}"
        case FailClose():
            return f"fail-close {action.error.kind.value}: {action.error.message}"
        case SendReadLac():
            fence = " fence" if action.fence else ""
            return f"send-read-lac to={action.bookie}@{action.bookie_index}{fence}"
        case CompleteReadLac():
            return f"complete-read-lac lac={action.lac} length={action.length}"
        case FailReadLac():
            return f"fail-read-lac {action.reason.value}: {action.message}"
        case SendRead():
            fence = " fence" if action.fence else ""
            return f"send-read e={action.entry_id} to={action.bookie}{fence}"
        case CompleteRead():
            return f"complete-read e={action.entry_id} from={action.bookie}"
        case FailRead():
            return f"fail-read e={action.entry_id} {action.reason.value}: {action.message}"
        case RecordHealth():
            return f"record-health {action.bookie} {action.health.value}"
        case FailRecovery():
            return f"fail-recovery: {action.message}"
    raise AssertionError(f"no rendering for {action!r}")


def _time(value: float | None) -> str:
    return "none" if value is None else f"{value:g}"


class Runner:
    """One script's machine; `run(command)` returns the lines the command should print."""

    def __init__(self) -> None:
        self.machine: Machine | None = None

    def run(self, command: str) -> list[str]:
        args = Args(command)
        method = getattr(self, "cmd_" + args.name.replace("-", "_"), None)
        if method is None:
            raise ValueError(f"unknown command {args.name!r}")
        output: list[str] = method(args)
        args.finish()
        assert self.machine is not None, "the first command must make a machine"
        output += [render(action) for action in self.machine.take_actions()]
        self.machine.validate()
        return output

    def _feed(self, event: object) -> list[str]:
        machine: Any = self.machine
        machine.handle(event)
        return []

    def _add(self) -> AddState:
        assert isinstance(self.machine, AddState), "an AddState command on another machine"
        return self.machine

    # ----------------------------------------------------------------------- machines

    def cmd_new_add(self, args: Args) -> list[str]:
        config = AddConfig(
            add_timeout_s=args.number("timeout", 5.0),
            # off unless a script names it: the scripts time adds out by add_timeout_s
            quorum_lag_s=args.number("quorum-lag", 0.0) or None,
            pending_adds_max=args.integer("max-pending", 1000),
            ensemble_changes_max=args.integer("max-changes", 64),
        )
        self.machine = AddState(
            args.names("ensemble"),
            args.integer("write"),
            args.integer("ack"),
            lac=args.integer("lac", -1),
            length=args.integer("length", 0),
            recovery=args.flag("recovery"),
            now_s=args.number("now", 0.0),
            config=config,
        )
        return []

    def cmd_new_recovery(self, args: Args) -> list[str]:
        ensembles = []
        for spec in args.texts("ensemble"):  # first_entry_id:b0,b1,b2
            first, _, bookies = spec.partition(":")
            ensembles.append(Ensemble(int(first), tuple(bookies.split(","))))
        metadata = LedgerMetadata(
            ensemble_size=len(ensembles[0].bookies),
            write_quorum=args.integer("write"),
            ack_quorum=args.integer("ack"),
            ensembles=tuple(ensembles),
            digest_type=DigestType.CRC32C,
            password=b"secret",
            state=LedgerState.IN_RECOVERY,
        )
        config = RecoveryConfig(
            read_timeout_s=args.number("timeout", 5.0),
            entries_in_flight_max=args.integer("window", 64),
            add=AddConfig(add_timeout_s=args.number("add-timeout", 5.0)),
        )
        self.machine = RecoveryState(metadata, now_s=args.number("now", 0.0), config=config)
        return []

    def cmd_new_read_lac(self, args: Args) -> list[str]:
        self.machine = ReadLacState(
            args.names("ensemble"),
            args.integer("write"),
            args.integer("ack"),
            now_s=args.number("now", 0.0),
            fence=args.flag("fence"),
            try_above=args.integer("try-above") if args.has("try-above") else None,
            timeout_s=args.number("timeout", 5.0),
        )
        return []

    def cmd_new_read(self, args: Args) -> list[str]:
        self.machine = EntryReadState(
            args.integer("e"),
            args.names("order"),
            now_s=args.number("now", 0.0),
            delays_s=args.numbers("delays"),
            timeout_s=args.number("timeout", 5.0),
            fence=args.flag("fence"),
            parallel=args.flag("parallel"),
            missing_quorum=args.integer("missing-quorum") if args.has("missing-quorum") else None,
        )
        return []

    # ------------------------------------------------------------------------- inputs

    def cmd_submit(self, args: Args) -> list[str]:
        add = self._add()
        entry_id = add.submit(args.integer("len"))
        if entry_id is None:
            assert add.error is not None
            return [f"refused {add.error.kind.value}: {add.error.message}"]
        return [f"entry {entry_id}"]

    def cmd_respread(self, args: Args) -> list[str]:
        return ["started" if self._add().respread(args.integer("index")) else "refused"]

    def cmd_close(self, args: Args) -> list[str]:
        self._add().begin_close()
        return []

    def cmd_state(self, args: Args) -> list[str]:
        add = self._add()
        return [
            f"lac={add.lac} lap={add.lap} length={add.length} pushed={add.pushed_length} "
            f"pending={add.pending_count} room={add.room} ensemble={','.join(add.ensemble)}"
        ]

    def cmd_wakeup(self, args: Args) -> list[str]:
        assert self.machine is not None
        return [f"wakeup={_time(self.machine.next_wakeup_s())}"]

    # ------------------------------------------------------------------------- events

    def cmd_tick(self, args: Args) -> list[str]:
        return self._feed(Ticked(args.number("now")))

    def cmd_acked(self, args: Args) -> list[str]:
        return self._feed(AddAcked(args.integer("e"), args.text("from")))

    def cmd_add_failed(self, args: Args) -> list[str]:
        kind = BookieFailure(args.text("kind"))
        return self._feed(AddFailed(args.integer("e"), args.text("from"), kind))

    def cmd_changed(self, args: Args) -> list[str]:
        ensemble = tuple(args.names("ensemble"))
        return self._feed(EnsembleChanged(args.integer("first"), ensemble))

    def cmd_change_failed(self, args: Args) -> list[str]:
        kind = AddErrorKind(args.text("kind"))
        return self._feed(EnsembleChangeFailed(kind, args.text("reason")))

    def cmd_lac_replied(self, args: Args) -> list[str]:
        event = LacReplied(args.text("from"), args.integer("lac"), args.integer("length"))
        return self._feed(event)

    def cmd_lac_failed(self, args: Args) -> list[str]:
        return self._feed(LacReadFailed(args.text("from"), BookieFailure(args.text("kind"))))

    def cmd_entry_read(self, args: Args) -> list[str]:
        entry = args.integer("e")
        event = EntryRead(entry, args.text("from"), args.integer("payload"), args.integer("length"))
        return self._feed(event)

    def cmd_entry_read_failed(self, args: Args) -> list[str]:
        kind = BookieFailure(args.text("kind"))
        return self._feed(EntryReadFailed(args.integer("e"), args.text("from"), kind))
