"""A dry run's side of the broker: the calls it plans instead of sending, and the reads it makes.

In a dry run (``codemode run --plan``) every call still passes the gates. A call known to be
read-only (risk ``low``: the policy's ``read_only``, a trusted server's hints, or hints accepted
at pin review) is sent, and noted as a read. Every other call is not sent: it is recorded here as
a :class:`PlannedCall` - its tool, its arguments as the program passed them (secrets hidden), the
digest an approval binds, its occurrence, its risk and what the gates said - and the program gets
a placeholder (:class:`~codemode.calls.CallPlanned`) that it may pass on but not inspect.

A placeholder passed in a later call's arguments arrives as a reference, ``{"$planned": N}``
(``"path"`` naming a field of the result), and is digested as one: the plan binds "the result of
planned call N", not a value nobody has seen. A call holding a reference is planned too, even a
read: the value it needs does not exist in a dry run.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from codemode._redaction import redact_value_counting
from codemode.calls import CallPlanned
from codemode.config import Risk

REFERENCE_KEY = "$planned"


def reference_index(value: Any) -> int | None:
    """The planned call a value refers to, when it is a reference (``{"$planned": N, "path"?}``)."""
    if not isinstance(value, dict):
        return None
    ref = cast(dict[str, Any], value)
    index = ref.get(REFERENCE_KEY)
    if not isinstance(index, int) or isinstance(index, bool) or not set(ref) <= {REFERENCE_KEY, "path"}:
        return None
    return index


def references(value: Any) -> tuple[int, ...]:
    """Every planned call ``value`` refers to, at any depth, first met first."""
    found: list[int] = []
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        index = reference_index(item)
        if index is not None:
            found.append(index)
        elif isinstance(item, dict):
            stack.extend(reversed(list(cast(dict[str, Any], item).values())))
        elif isinstance(item, list):
            stack.extend(reversed(cast(list[Any], item)))
    return tuple(dict.fromkeys(found))


@dataclass(frozen=True)
class PlannedCall:
    """One call a dry run did not send, with everything an approval of it binds."""

    index: int
    server: str
    tool: str
    arguments: Mapping[str, Any]
    """As the program passed them, secrets hidden (for a person to read, not to replay)."""
    args_digest: str
    """What an approval binds (the consent gate's digest: defaults filled, the pin's hash)."""
    occurrence: int
    """How many calls of this tool with these arguments came before it in the run (0: first)."""
    risk: Risk
    decisions: tuple[str, ...]
    """What the gates said, one line each, and what consent would do in a real run."""
    references: tuple[int, ...] = ()
    """The planned calls whose results its arguments hold."""

    @property
    def label(self) -> str:
        return f"{self.server}/{self.tool}"

    def as_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "server": self.server,
            "tool": self.tool,
            "arguments": dict(self.arguments),
            "args_digest": self.args_digest,
            "occurrence": self.occurrence,
            "risk": self.risk,
            "decisions": list(self.decisions),
            "references": list(self.references),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PlannedCall:
        return cls(
            index=int(data["index"]),
            server=str(data["server"]),
            tool=str(data["tool"]),
            arguments=dict(data["arguments"]),
            args_digest=str(data["args_digest"]),
            occurrence=int(data["occurrence"]),
            risk=cast(Risk, data["risk"]),
            decisions=tuple(str(d) for d in data["decisions"]),
            references=tuple(int(i) for i in data.get("references", ())),
        )


@dataclass(frozen=True)
class PlannedRead:
    """A read-only call the dry run sent."""

    server: str
    tool: str
    args_digest: str

    def as_json(self) -> dict[str, Any]:
        return {"server": self.server, "tool": self.tool, "args_digest": self.args_digest}


@dataclass
class Planner:
    """Collects one dry run's planned calls and reads (calls may come from parallel threads)."""

    calls: list[PlannedCall] = field(default_factory=lambda: list[PlannedCall]())
    reads: list[PlannedRead] = field(default_factory=lambda: list[PlannedRead]())
    _seen: Counter[tuple[str, str, str]] = field(default_factory=lambda: Counter[tuple[str, str, str]]())
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def plan(
        self,
        *,
        server: str,
        tool: str,
        as_passed: Mapping[str, Any],
        args_digest: str,
        risk: Risk,
        decisions: Sequence[str],
    ) -> CallPlanned:
        """Record a call as planned; what the program gets back instead of a result."""
        shown, _ = redact_value_counting(dict(as_passed))
        refs = references(dict(as_passed))
        with self._lock:
            key = (server, tool, args_digest)
            occurrence = self._seen[key]
            self._seen[key] += 1
            index = len(self.calls)
            unknown = [i for i in refs if i >= index]
            lines = list(decisions)
            if unknown:
                # A reference the program made up: planned in the open, never matched later.
                lines.append(f"refers to planned call(s) {unknown} that this plan does not hold")
            self.calls.append(
                PlannedCall(
                    index=index,
                    server=server,
                    tool=tool,
                    arguments=cast(dict[str, Any], shown),
                    args_digest=args_digest,
                    occurrence=occurrence,
                    risk=risk,
                    decisions=tuple(lines),
                    references=refs,
                )
            )
        return CallPlanned(index=index)

    def note_read(self, server: str, tool: str, args_digest: str) -> None:
        with self._lock:
            self.reads.append(PlannedRead(server, tool, args_digest))
