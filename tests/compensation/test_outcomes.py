"""A run's end state from its status, its check and its compensation report."""

from __future__ import annotations

import pytest

from codemode.engine import CompensationReport, Effect
from codemode.engine._compensate import EffectStatus, run_outcome


def _report(*statuses: EffectStatus, dry_run: bool = False) -> CompensationReport:
    effects = tuple(
        Effect(call_id=f"run/{n}", tool="notes/add_note", status=s) for n, s in enumerate(statuses)
    )
    return CompensationReport(run_id="run", effects=effects, dry_run=dry_run)


@pytest.mark.parametrize(
    ("statuses", "outcome"),
    [
        ((), "nothing to undo"),
        (("compensated", "compensated"), "compensated"),
        (("compensated", "compensation failed"), "compensation failed"),
        (("compensated", "not compensable"), "partial"),
        (("compensated", "in doubt"), "partial"),
        (("compensation in doubt",), "partial"),
    ],
)
def test_a_reports_outcome(statuses: tuple[EffectStatus, ...], outcome: str) -> None:
    assert _report(*statuses).outcome == outcome


@pytest.mark.parametrize(
    ("status", "verified", "report", "outcome"),
    [
        ("ok", None, _report(), "succeeded"),
        ("ok", True, _report(), "succeeded"),
        ("ok", False, _report(), "unverified"),
        ("ok", False, _report("would compensate", dry_run=True), "unverified"),
        ("ok", False, _report("compensated"), "compensated"),
        ("error", None, _report(), "failed"),
        ("error", None, _report("would compensate", dry_run=True), "partial"),
        ("error", None, _report("compensated", "compensated"), "compensated"),
        ("error", None, _report("compensated", "compensation failed"), "compensation failed"),
        ("error", None, _report("compensated", "not compensable"), "partial"),
    ],
)
def test_a_runs_outcome(status: str, verified: bool | None, report: CompensationReport, outcome: str) -> None:
    assert run_outcome(status, verified, report) == outcome


def test_a_secret_in_what_an_effect_says_is_hidden() -> None:
    # A compensating tool's error text is the server's: it may quote a credential.
    token = "ghp_" + "a" * 36
    effect = Effect(
        call_id="run/0", tool="notes/add_note", status="compensation failed", detail=f"bad {token}"
    )
    assert token not in (effect.detail or "") and "REDACTED" in (effect.detail or "")
