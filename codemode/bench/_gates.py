"""What the broker's gates decided about a task's MCP calls, read from the ledger: every call a
program or a direct call made is a row there, allowed or denied (with the gate that denied it),
in both modes alike."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from codemode.ledger import CallRecord

ARGUMENTS_GATE = "arguments"
BEFORE_ARGUMENTS = frozenset({"principal", "tool"})
"""The gates that judge a call before its arguments are checked (who asks, and whether the tool
is the pinned one): a call they deny never reaches the argument-schema check, so it counts
neither for nor against the schema pass rate. Every later gate saw arguments that passed."""


@dataclass
class GateStats:
    attempted: int = 0
    denied: Counter[str] = field(default_factory=lambda: Counter[str]())
    """Denials per ``gate:server/tool``."""
    arguments_checked: int = 0
    arguments_denied: int = 0

    @property
    def denials(self) -> int:
        return self.denied.total()


def gate_stats(rows: Iterable[CallRecord]) -> GateStats:
    stats = GateStats()
    for row in rows:
        stats.attempted += 1
        gate = (row.gate or "unknown") if row.state == "denied" else None
        if gate is not None:
            stats.denied[f"{gate}:{row.server}/{row.tool}"] += 1
        if gate not in BEFORE_ARGUMENTS:
            stats.arguments_checked += 1
            stats.arguments_denied += gate == ARGUMENTS_GATE
    return stats
