"""Why an item failed: whether another attempt would fail the same way, and the reason that a
job's summary counts it under.

Both come from what the broker counted during the run (calls let through, denials by gate and
tool, calls that failed), not from the program's error text: the program writes that text, and
may catch one error and raise another.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from codemode.batch._jobs import ItemStatus
    from codemode.engine import RunResult

POLICY_GATES = frozenset({"principal", "tool", "arguments", "resource", "consent"})
"""Gates whose denial the same program meets again on another attempt: who may call what, the
pins, the argument schemas, the resource scopes, consent. Not ``budget``: its wall-time budget
also runs out when a server is slow (with no call let through, a budget denial repeats too)."""

_DENIAL_WORDS = {"consent": "needs approval"}
"""How a denial by a gate reads as a failure's reason (``denied by the X gate`` otherwise)."""

REASON_CHARS = 160
"""The longest reason shown for a group of failures."""
DETAIL_LINES = 6
"""The most lines of an error shown under its group's reason."""


@dataclass(frozen=True)
class Failure:
    text: str
    """The item's error: its first line is the reason it is counted under."""
    repeats: bool
    """Another attempt would fail the same way, so it gets none in this run."""


def failure_of(result: RunResult) -> Failure:
    """Why the run of an item failed, and whether running it again could end otherwise.

    It fails the same way again when the program raised (it was not timed out, killed or cut off)
    with no call left in an unknown state or failed on the way, and either a policy gate denied
    one of its calls, or nothing it asked for reached a server: then the same program meets the
    same denial, or its own error, again. Anything else may be transient and is retried; a retry
    replays the calls that completed, so no write is sent twice.
    """
    text = run_error(result)
    error = result.error
    if error is None or error.kind != "exception":
        return Failure(text, repeats=False)  # timed out, killed, the sandbox failed: not the program
    denied = [kind for kind in result.denied if result.calls == 0 or _gate(kind) in POLICY_GATES]
    if denied:
        gate, label = _gate(denied[0]), denied[0].partition(":")[2]
        text = f"{_DENIAL_WORDS.get(gate, f'denied by the {gate} gate')}: {label}\n{text}"
    settled = not result.unknown_outcomes and not result.failed_calls
    before_any_call = result.calls == 0 and not result.denied
    return Failure(text, repeats=settled and (bool(denied) or before_any_call))


def _gate(kind: str) -> str:
    return kind.partition(":")[0]


def run_error(result: RunResult) -> str:
    if result.error is None:
        return "the run failed"
    return f"{result.error.type}: {result.error.message}"


_VARYING = (
    # Quoted values first: they hold the item's own data (a key, a name, a value).
    (re.compile(r"'(?:[^'\\\n]|\\.)*'|\"(?:[^\"\\\n]|\\.)*\""), "'…'"),
    # Ids: a run's, a call's, a receipt's, a UUID (hex with a digit, 8 characters or more).
    (re.compile(r"(?<![0-9A-Za-z])(?=[0-9a-fA-F-]*[0-9])[0-9a-fA-F][0-9a-fA-F-]{7,}(?![0-9A-Za-z])"), "…"),
    # Numbers that stand alone (not part of a name such as add_note2 or a version such as v1).
    (re.compile(r"(?<![\w.])[-+]?\d+(?:\.\d+)?(?![\w.])"), "N"),
)


def reason_key(error: str | None) -> str:
    """What items that failed for the same reason share: the error's first line with the values
    that vary from item to item (quoted values, ids, numbers) replaced."""
    line = first_line(error)
    for pattern, placeholder in _VARYING:
        line = pattern.sub(placeholder, line)
    return _capped(line)


def first_line(error: str | None) -> str:
    return " ".join((error or "no reason recorded").strip().split("\n", 1)[0].split())


def _capped(text: str) -> str:
    return text if len(text) <= REASON_CHARS else text[: REASON_CHARS - 1] + "…"


@dataclass
class FailureGroup:
    status: ItemStatus
    reason: str
    """The items' own first line when they all share it, else what they share (see
    :func:`reason_key`)."""
    count: int
    attempts: tuple[int, int]
    """The fewest and the most attempts an item of the group had."""
    detail: str = ""
    """The lines after the first of the first item's error (at most ``DETAIL_LINES``): after
    codemode's summary of a denial, its reason in full, with the ways out."""

    def to_json(self) -> dict[str, object]:
        return {"status": self.status, "count": self.count, "reason": self.reason, "detail": self.detail}


def group_failures(failures: Iterable[tuple[ItemStatus, int, str | None]]) -> list[FailureGroup]:
    """Failed, unknown and unverified items, one group per status and reason, largest first."""
    groups: dict[tuple[str, str], FailureGroup] = {}
    for status, attempts, error in failures:
        key = reason_key(error)
        group = groups.get((status, key))
        if group is None:
            detail = "\n".join((error or "").strip().split("\n")[1 : 1 + DETAIL_LINES])
            groups[status, key] = FailureGroup(
                status, _capped(first_line(error)), 1, (attempts, attempts), detail
            )
            continue
        group.count += 1
        group.attempts = (min(group.attempts[0], attempts), max(group.attempts[1], attempts))
        if group.reason != key and _capped(first_line(error)) != group.reason:
            group.reason = key  # the items differ in a value: show what they share
    return sorted(groups.values(), key=lambda group: -group.count)
