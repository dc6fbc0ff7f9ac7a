"""What every backend-neutral ledger operation works with: the store and the ledger's settings."""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime

from codemode._redaction import redact_secrets
from codemode.ledger._time import Clock
from codemode.ledger.stores import LedgerStore, StoreTransaction

MAX_REASON_CHARS = 2000


@dataclass(frozen=True, slots=True)
class LedgerContext:
    store: LedgerStore
    clock: Clock
    owner: str
    """This ledger object's lease owner id (``host:pid:started:nonce``)."""
    lease_s: float
    store_arguments: bool
    max_result_bytes: int
    genesis: str
    """The chain's hash before the first event (from the store's ledger id)."""
    released: set[str] = field(default_factory=set[str])
    """Calls of this owner whose outcome it could not record (the store was out of reach): it
    will never write them again, so their lease is not live even before it expires."""

    @property
    def location(self) -> str:
        return self.store.location

    def now(self) -> datetime:
        return self.clock()

    def write(self, *, durable: bool = True) -> AbstractContextManager[StoreTransaction]:
        return self.store.transaction(write=True, durable=durable)

    def read(self) -> AbstractContextManager[StoreTransaction]:
        # One snapshot for multi-query reads.
        return self.store.transaction(write=False)


def clip(text: str, limit: int = MAX_REASON_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def stored_text(text: str, limit: int = MAX_REASON_CHARS) -> str:
    """A free text (a reason, evidence, a note) as the ledger keeps it: secrets hidden, clipped.

    Error messages and reasons often quote argument values, so they get the same treatment as
    the arguments themselves.
    """
    return clip(redact_secrets(text)[0], limit)
