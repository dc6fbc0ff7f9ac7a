"""A run under an approved plan (``codemode run --with-plan``): which calls the approval covers.

A side-effecting call passes consent without asking when it matches an approved planned call:
the same server and tool, the same argument digest, the same occurrence (how many calls of that
tool with those arguments came before it in the run), each planned call used once. A planned call
whose arguments held a planned result (``{"$planned": N, "path": [...]}``) matches when the value
the program passes there is the result that planned call N's real call returned in this run -
compared as the program saw both, so the PII tokens of a result match themselves - and then the
call is digested with the reference in its place, as the dry run digested it.

A call that matches nothing is outside the plan: consent asks as usual, and the run's summary
counts it. The match is made under a lock: parallel calls take planned calls one at a time.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from codemode.broker._planning import PlannedCall, reference_index
from codemode.calls import CallOutcome, ToolResult

Digest = Callable[[dict[str, Any]], str]
"""The consent gate's digest of a call's arguments (pinned defaults filled, the pin's hash)."""


@dataclass(frozen=True)
class PlanMatch:
    index: int
    approver: str
    """Who approved the call, for its approval record: ``plan:<plan id>#<planned call>``."""
    expires_at: float


def _program_value(outcome: ToolResult) -> Any:
    """A result as the program received it (the runtime's rule): structured content if any, else
    the content, text parsed as JSON when it parses; one item bare, several as a list."""
    if outcome.structured is not None:
        return outcome.structured
    items: list[Any] = []
    for block in outcome.content:
        text = getattr(block, "text", None)
        if block.type == "text" and isinstance(text, str):
            try:
                items.append(json.loads(text))
            except ValueError:
                items.append(text)
        else:
            items.append(block.model_dump())
    if not items:
        return None
    return items[0] if len(items) == 1 else items


_MISSING = object()


def _at_path(value: Any, path: Sequence[Any]) -> Any:
    if value is _MISSING:
        return _MISSING
    for step in path:
        if isinstance(value, dict) and isinstance(step, str):
            value = cast(dict[str, Any], value).get(step, _MISSING)
        elif isinstance(value, list) and isinstance(step, int):
            items = cast(list[Any], value)
            value = items[step] if -len(items) <= step < len(items) else _MISSING
        else:
            return _MISSING
        if value is _MISSING:
            return _MISSING
    return value


@dataclass
class ApprovedPlan:
    """One run's use of an approved plan: its planned calls, which were used, what they returned."""

    plan_id: str
    calls: tuple[PlannedCall, ...]
    expires_at: float
    """When the plan's approval expires (Unix time): a call after it is outside the plan."""
    used: set[int] = field(default_factory=lambda: set[int]())
    results: dict[int, Any] = field(default_factory=lambda: dict[int, Any]())
    """Per used planned call, its real result as the program received it (for references)."""
    outside: int = 0
    """Side-effecting calls of the run that matched no planned call."""
    _seen: Counter[tuple[str, str, str]] = field(default_factory=lambda: Counter[tuple[str, str, str]]())
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def match(
        self,
        server: str,
        tool: str,
        arguments: Mapping[str, Any],
        as_passed: Mapping[str, Any],
        digest: Digest,
    ) -> PlanMatch | None:
        """The planned call this side-effecting call is, taken for it; None (counted as outside the
        plan) when there is none. ``arguments`` as sent, ``as_passed`` as the program passed them."""
        with self._lock:
            plain = digest(dict(arguments))
            for planned in self.calls:
                if (planned.server, planned.tool) != (server, tool) or planned.index in self.used:
                    continue
                candidate = plain
                if planned.references:
                    form = self._referenced(planned, arguments, as_passed)
                    if form is None:
                        continue
                    candidate = digest(form)
                seen = self._seen[(server, tool, candidate)]
                if candidate != planned.args_digest or seen != planned.occurrence:
                    continue
                self._seen[(server, tool, candidate)] += 1
                self.used.add(planned.index)
                return PlanMatch(planned.index, f"plan:{self.plan_id}#{planned.index}", self.expires_at)
            self._seen[(server, tool, plain)] += 1
            self.outside += 1
            return None

    def _referenced(
        self, planned: PlannedCall, arguments: Mapping[str, Any], as_passed: Mapping[str, Any]
    ) -> dict[str, Any] | None:
        """``arguments`` with the planned call's references put back where the program passed the
        results they stand for; None when a value there is not that result."""
        ok, form = self._rebuild(dict(planned.arguments), dict(as_passed), dict(arguments))
        return cast(dict[str, Any], form) if ok else None

    def _rebuild(self, shape: Any, passed: Any, sent: Any) -> tuple[bool, Any]:
        """``sent`` with the references of ``shape`` (the plan's arguments) in place, where the
        program passed (``passed``) the very results they stand for."""
        index = reference_index(shape)
        if index is not None:
            path: Any = cast(dict[str, Any], shape).get("path", [])
            steps = cast(list[Any], path) if isinstance(path, list) else []
            expected = _at_path(self.results.get(index, _MISSING), steps)
            return (expected is not _MISSING and expected == passed), shape
        if isinstance(shape, dict) and isinstance(passed, dict) and isinstance(sent, dict):
            shape_d, passed_d = cast(dict[str, Any], shape), cast(dict[str, Any], passed)
            new_d = dict(cast(dict[str, Any], sent))
            for key, sub in shape_d.items():
                if key not in passed_d or key not in new_d:
                    return False, None
                ok, new_d[key] = self._rebuild(sub, passed_d[key], new_d[key])
                if not ok:
                    return False, None
            return True, new_d
        if isinstance(shape, list) and isinstance(passed, list) and isinstance(sent, list):
            shape_l, passed_l = cast(list[Any], shape), cast(list[Any], passed)
            new_l = list(cast(list[Any], sent))
            if not len(shape_l) == len(passed_l) == len(new_l):
                return False, None
            for i, sub in enumerate(shape_l):
                ok, new_l[i] = self._rebuild(sub, passed_l[i], new_l[i])
                if not ok:
                    return False, None
            return True, new_l
        return True, sent  # not a reference: the digest compares it

    def count_outside(self) -> None:
        """A side-effecting call the plan cannot cover (its approval expired during the run)."""
        with self._lock:
            self.outside += 1

    def completed(self, match: PlanMatch, outcome: CallOutcome) -> None:
        """Keep a matched call's result, for the planned calls that refer to it."""
        if isinstance(outcome, ToolResult):
            with self._lock:
                self.results[match.index] = _program_value(outcome)

    def flags(self) -> list[str]:
        """What the run's summary says about the plan: calls outside it, planned calls not made."""
        found: list[str] = []
        if self.outside:
            found.append(f"{self.outside} calls outside the approved plan {self.plan_id}")
        missing = len(self.calls) - len(self.used)
        if missing:
            found.append(f"{missing} planned calls of {self.plan_id} were not made")
        return found
