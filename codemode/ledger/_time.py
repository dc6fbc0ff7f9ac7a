"""Timestamps as fixed-width UTC strings.

Every time in the ledger is ``YYYY-MM-DDTHH:MM:SS.ffffffZ``: fixed width and always UTC, so
SQLite can compare them as text (``expires_at > ?``) and the hash chain never depends on a
float's printed form or on the machine's time zone.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

Clock = Callable[[], datetime]
"""Returns "now" as an aware datetime. Injected so tests can move time without sleeping."""

_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"


def system_clock() -> datetime:
    return datetime.now(UTC)


def to_text(moment: datetime) -> str:
    if moment.tzinfo is None:
        raise ValueError("ledger times must be timezone-aware")
    return moment.astimezone(UTC).strftime(_FORMAT)


def from_text(text: str) -> datetime:
    return datetime.strptime(text, _FORMAT).replace(tzinfo=UTC)


def later(moment: datetime, seconds: float) -> str:
    return to_text(moment + timedelta(seconds=seconds))
