"""The call state machine, written once.

Every change to a call is one event, and :data:`CALL_EVENTS` says, for each event kind, from
which states it may start and which states it may leave. Everything else is derived from that
table: the reducer (and so ``verify``) refuses any other move, the ledger's operations check
their preconditions with :func:`sources`, and :data:`CALL_TRANSITIONS` (state → next states) is
built from it for documentation and tests. A second store never restates these rules.

States (see :mod:`codemode.ledger._models` for the picture)::

    (new) ─► reserved ─► sent ─► succeeded | failed | refused | unknown
               ├──► refused | abandoned
    unknown ─► reconciled_succeeded | reconciled_failed | succeeded | failed (a late answer)
    (new) ─► denied | replayed
    (new) ─► succeeded | failed | refused   (a read-only call, recorded once it is over)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

CallState = Literal[
    "reserved",
    "sent",
    "succeeded",
    "failed",
    "refused",
    "unknown",
    "abandoned",
    "denied",
    "replayed",
    "reconciled_succeeded",
    "reconciled_failed",
]
CALL_STATES: tuple[CallState, ...] = get_args(CallState)

NEW = "(new)"
"""The pseudo-state of a call that has no row yet: events starting from it create the row."""

IN_FLIGHT: frozenset[str] = frozenset({"reserved", "sent"})
"""Holding a lease: an owner is about to send it or waiting for its answer."""
REPLAYABLE: frozenset[str] = frozenset({"succeeded", "failed", "reconciled_succeeded"})
"""Outcomes later calls with the same key get back instead of running again."""
KEY_FREEING: frozenset[str] = frozenset({"refused", "abandoned", "reconciled_failed"})
"""Nothing happened: a new attempt under the same key may run."""
KEY_HOLDING: frozenset[str] = IN_FLIGHT | REPLAYABLE | {"unknown"}
"""States that block a second execution of their key (``unknown`` until it is reconciled)."""
KEYLESS: frozenset[str] = frozenset({"denied", "replayed"})
"""Rows that never hold a key: they record a call that was not sent."""


@dataclass(frozen=True, slots=True)
class CallEvent:
    """One kind of change to a call: the states it starts from and the states it may leave."""

    sources: frozenset[str]
    """States the call must be in (``NEW``: the event creates the row)."""
    targets: frozenset[str] | None
    """States the event may leave it in; None: the state must not change."""


def _event(sources: frozenset[str] | set[str], targets: set[str] | None) -> CallEvent:
    return CallEvent(frozenset(sources), None if targets is None else frozenset(targets))


CALL_EVENTS: dict[str, CallEvent] = {
    "call_reserved": _event({NEW}, {"reserved"}),
    "call_denied": _event({NEW}, {"denied"}),
    "call_replayed": _event({NEW}, {"replayed"}),
    # A read-only call recorded after the fact, in its final state (see codemode.ledger._reads).
    "call_read": _event({NEW}, {"succeeded", "failed", "refused"}),
    "call_sent": _event({"reserved"}, {"sent"}),
    "lease_extended": _event(IN_FLIGHT, None),
    # The server asked for input during the call (elicitation) and the host answered it.
    "call_input_answered": _event({"sent"}, None),
    "call_completed": _event({"sent", "unknown"}, {"succeeded", "failed"}),
    # 429/503 or an unreachable server: refused before or after the request left, never run.
    "call_refused": _event(IN_FLIGHT, {"refused"}),
    "call_unknown": _event({"sent"}, {"unknown"}),
    "call_abandoned": _event({"reserved"}, {"abandoned"}),
    "call_reconciled": _event({"unknown"}, {"reconciled_succeeded", "reconciled_failed"}),
}


def _transitions() -> dict[str, frozenset[str]]:
    moves: dict[str, set[str]] = {}
    for event in CALL_EVENTS.values():
        for source in event.sources - {NEW}:
            moves.setdefault(source, set()).update(event.targets or ())
    return {state: frozenset(targets) for state, targets in moves.items() if targets}


CALL_TRANSITIONS: dict[str, frozenset[str]] = _transitions()
"""Allowed moves between existing states, derived from :data:`CALL_EVENTS`. Every other state is final."""

FINAL: frozenset[str] = frozenset(CALL_STATES) - CALL_TRANSITIONS.keys()


def sources(kind: str) -> frozenset[str]:
    """The states a call must be in for an event of ``kind`` to apply to it."""
    return CALL_EVENTS[kind].sources


def check_call_event(kind: str, old_state: str | None, new_state: object) -> str | None:
    """Why the event ``kind`` cannot move a call from ``old_state`` (None: no row) to ``new_state``;
    None when it can."""
    event = CALL_EVENTS[kind]
    start = NEW if old_state is None else old_state
    if start not in event.sources:
        if old_state is None:
            return f"{kind} applies to an existing call"
        if event.targets is None:
            return f"{kind} applies to a call in flight, not to one in state {old_state}"
        if NEW in event.sources:
            return f"{kind} creates a call; it cannot apply to one in state {old_state}"
        return f"a call in state {old_state} cannot become {new_state}"
    if event.targets is None:
        return (
            None
            if new_state == old_state
            else f"{kind} must not change the state ({old_state} -> {new_state})"
        )
    if new_state not in event.targets:
        return f"{kind} cannot leave a call in state {new_state}"
    return None
