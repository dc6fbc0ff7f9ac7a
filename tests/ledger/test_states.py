"""The one table of call states: its derived sets agree with each other and with the schema."""

from __future__ import annotations

from codemode.ledger import (
    CALL_EVENTS,
    CALL_STATES,
    CALL_TRANSITIONS,
    IN_FLIGHT,
    KEY_FREEING,
    KEY_HOLDING,
    REPLAYABLE,
)
from codemode.ledger._reduce import EVENT_KINDS
from codemode.ledger._states import FINAL, KEYLESS, NEW, check_call_event


def test_the_key_sets_partition_the_states() -> None:
    assert set(CALL_STATES) == KEY_HOLDING | KEY_FREEING | KEYLESS
    assert not KEY_HOLDING & KEY_FREEING
    assert not KEY_HOLDING & KEYLESS
    assert not KEY_FREEING & KEYLESS
    assert IN_FLIGHT | REPLAYABLE <= KEY_HOLDING


def test_every_event_names_only_known_states_and_creates_or_updates_a_call_row() -> None:
    for kind, event in CALL_EVENTS.items():
        assert event.sources <= {*CALL_STATES, NEW}, kind
        assert event.targets is None or event.targets <= set(CALL_STATES), kind
        assert EVENT_KINDS[kind] == ("calls", "create" if NEW in event.sources else "update")


def test_final_states_have_no_way_out_and_in_flight_ones_do() -> None:
    assert set(CALL_STATES) - CALL_TRANSITIONS.keys() == FINAL
    assert {"succeeded", "failed", "denied", "replayed", "refused", "abandoned"} <= FINAL
    assert "reconciled_succeeded" in FINAL and "reconciled_failed" in FINAL
    assert IN_FLIGHT | {"unknown"} == CALL_TRANSITIONS.keys()


def test_check_call_event_names_what_is_wrong() -> None:
    assert check_call_event("call_sent", "reserved", "sent") is None
    assert (
        check_call_event("call_sent", "succeeded", "sent") == "a call in state succeeded cannot become sent"
    )
    assert (
        check_call_event("call_completed", "sent", "refused")
        == "call_completed cannot leave a call in state refused"
    )
    assert check_call_event("lease_extended", "sent", "sent") is None
    assert "must not change" in (check_call_event("lease_extended", "sent", "unknown") or "")
    assert "in flight" in (check_call_event("lease_extended", "unknown", "unknown") or "")
    assert "existing call" in (check_call_event("call_sent", None, "sent") or "")
    assert "creates a call" in (check_call_event("call_denied", "reserved", "denied") or "")
