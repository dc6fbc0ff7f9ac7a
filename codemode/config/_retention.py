"""The ``[ledger.retention]`` section: when old events of the ledger move to archive files.

What archiving does, and what ``ledger verify`` checks after it, is decided by
:mod:`codemode.ledger`; these settings only say how old an event must be and where its segment goes.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["LedgerRetention"]


class LedgerRetention(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    archive_after_days: int | None = Field(default=None, ge=1, le=36_500)
    """Events older than this many days are archived by ``codemode ledger archive`` run without
    ``--before`` (from a timer, say daily). Unset: nothing is archived unless ``--before`` says so."""
    archive_dir: str = "ledger-archive"
    """The directory of the archive segments, relative to the config file. Keep it (and a copy
    elsewhere): ``codemode ledger verify --archive`` needs every segment to check the whole chain."""
