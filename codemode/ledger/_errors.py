"""Errors of the ledger, under :class:`codemode.errors.LedgerError`."""

from __future__ import annotations

from codemode.errors import LedgerError


class LedgerStateError(LedgerError):
    """The requested change does not fit the record's state (e.g. completing a call never sent)."""


class LeaseLostError(LedgerStateError):
    """This process no longer holds the call's lease (it expired): the request must NOT be sent."""
