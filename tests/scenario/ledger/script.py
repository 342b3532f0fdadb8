"""The golden script format (after etcd raft's datadriven testdata), parsed and re-rendered.

A script is a sequence of blocks separated by blank lines; `#` lines are comments:

    # why this step matters
    acked e=0 from=b1          <- one command: a machine, an input or an event
    ----
    complete-adds e=0..0 length=10    <- the actions it produced, one per line,
                                         or "(no actions)"

Arguments are `key=value` (quote values with spaces: reason="no bookies") or bare flags.
Set GLOBELOG_REWRITE=1 to rewrite every script with the actual output (then review the diff).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Protocol

SEPARATOR = "----"
NO_ACTIONS = "(no actions)"


@dataclass(frozen=True, slots=True)
class Block:
    line_no: int  # of the command, 1-based
    command: str
    expected: tuple[str, ...]


ScriptItem = Block | str  # a str is a comment or blank line, kept as is on rewrite


def parse_script(text: str, source: str) -> list[ScriptItem]:
    lines = text.splitlines()
    items: list[ScriptItem] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip() or line.startswith("#"):
            items.append(line)
            i += 1
            continue
        if i + 1 >= len(lines) or lines[i + 1] != SEPARATOR:
            raise ValueError(f"{source}:{i + 1}: command {line!r} is not followed by {SEPARATOR}")
        j = i + 2
        while j < len(lines) and lines[j].strip():
            j += 1
        items.append(Block(i + 1, line, tuple(lines[i + 2 : j])))
        i = j
    return items


class ScriptRunner(Protocol):
    def run(self, command: str) -> list[str]: ...


def run_blocks(text: str, source: str, runner: ScriptRunner) -> tuple[str, list[str]]:
    """Runs every block of a script: the script re-rendered with the actual outputs, and a
    description of each block whose output differs from the expected one."""
    items = parse_script(text, source)
    outputs: dict[int, list[str]] = {}
    mismatches: list[str] = []
    for item in items:
        if not isinstance(item, Block):
            continue
        try:
            actual = runner.run(item.command)
        except Exception as err:
            raise AssertionError(f"{source}:{item.line_no}: {item.command!r} raised") from err
        outputs[item.line_no] = actual
        if tuple(actual or [NO_ACTIONS]) != item.expected:
            mismatches.append(
                f"{source}:{item.line_no}: {item.command}\n"
                + "  expected:\n"
                + "".join(f"    {line}\n" for line in item.expected)
                + "  actual:\n"
                + "".join(f"    {line}\n" for line in actual or [NO_ACTIONS])
            )
    return render_script(items, outputs), mismatches


def render_script(items: list[ScriptItem], outputs: dict[int, list[str]]) -> str:
    """The script text with each block's output replaced by `outputs[line_no]`."""
    lines: list[str] = []
    for item in items:
        if isinstance(item, str):
            lines.append(item)
        else:
            lines += [item.command, SEPARATOR, *(outputs[item.line_no] or [NO_ACTIONS])]
    return "\n".join(lines) + "\n"


class Args:
    """The arguments of one command; `finish()` rejects any the command did not read."""

    def __init__(self, command: str) -> None:
        tokens = shlex.split(command)
        self.name = tokens[0]
        self._values: dict[str, list[str]] = {}
        self._flags: set[str] = set()
        for token in tokens[1:]:
            key, sep, value = token.partition("=")
            if sep:
                self._values.setdefault(key, []).append(value)
            else:
                self._flags.add(key)
        self._used: set[str] = set()

    def has(self, key: str) -> bool:
        return key in self._values

    def text(self, key: str, default: str | None = None) -> str:
        self._used.add(key)
        values = self._values.get(key)
        if values is None:
            if default is None:
                raise ValueError(f"{self.name}: missing argument {key}=")
            return default
        assert len(values) == 1, f"{self.name}: {key}= given {len(values)} times"
        return values[0]

    def texts(self, key: str) -> list[str]:
        """Every value of a repeated key."""
        self._used.add(key)
        return self._values.get(key, [])

    def integer(self, key: str, default: int | None = None) -> int:
        return int(self.text(key, None if default is None else str(default)))

    def number(self, key: str, default: float | None = None) -> float:
        return float(self.text(key, None if default is None else str(default)))

    def names(self, key: str) -> list[str]:
        """A comma-separated list (empty for "-")."""
        value = self.text(key)
        return [] if value == "-" else value.split(",")

    def numbers(self, key: str) -> list[float]:
        return [float(v) for v in self.names(key)] if self.has(key) else self._none(key)

    def _none(self, key: str) -> list[float]:
        self._used.add(key)
        return []

    def flag(self, key: str) -> bool:
        self._used.add(key)
        return key in self._flags

    def finish(self) -> None:
        unknown = (set(self._values) | self._flags) - self._used
        if unknown:
            raise ValueError(f"{self.name}: unknown argument(s) {sorted(unknown)}")
