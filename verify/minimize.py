"""The smallest history the checker still rejects: a failing run's history cut down, operation by
operation, while an anomaly of the same kind remains. A failing seed's report shows it, so a
reader sees the few sends, reads and faults that make the broken guarantee, not thousands."""

from __future__ import annotations

from verify.checker import check
from verify.history import Op

CHECKS_MAX = 3000  # the checker's runs one cut may take (each over what is left)


def minimal_history(history: list[Op], kind: str, stream: str | None = None) -> list[Op]:
    """The ops of `history` that an anomaly of `kind` needs: every operation (an invoke with
    its completion) whose removal keeps the anomaly is removed, in halving chunks (delta
    debugging), within CHECKS_MAX runs of the checker. `stream`: the anomaly's, whose
    operations alone are tried first."""
    groups = _operations(history)
    checks = 0

    def fails(kept: list[list[Op]]) -> bool:
        nonlocal checks
        checks += 1
        ops = sorted((op for group in kept for op in group), key=lambda op: op.index)
        return any(a.kind == kind for a in check(ops).anomalies)

    if not fails(groups):
        return history
    if stream is not None:
        own = [g for g in groups if g[0].stream in (stream, None)]
        if fails(own):
            groups = own
    chunk = max(1, len(groups) // 2)
    while checks < CHECKS_MAX:
        start = 0
        while start < len(groups) and checks < CHECKS_MAX:
            trial = groups[:start] + groups[start + chunk :]
            if trial and fails(trial):
                groups = trial
            else:
                start += chunk
        if chunk == 1:
            break
        chunk = max(1, chunk // 2)
    return sorted((op for group in groups for op in group), key=lambda op: op.index)


def _operations(history: list[Op]) -> list[list[Op]]:
    """The history's operations in order: a send's or poll's invoke with its completion (by
    process and value), every other op alone."""
    groups: list[list[Op]] = []
    open_invokes: dict[tuple[str, object], list[Op]] = {}
    for op in history:
        key = (op.process, op.value)
        if op.type == "invoke":
            group = [op]
            open_invokes[key] = group
            groups.append(group)
        elif key in open_invokes:
            open_invokes.pop(key).append(op)
        else:
            groups.append([op])
    return groups
