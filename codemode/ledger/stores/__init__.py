"""Where a ledger keeps its bytes: the storage contract and the stores that implement it.

The ledger's rules (the state machine, idempotency, leases, the hash chain, verify, recovery)
live one level up and reach storage only through :class:`LedgerStore` and
:class:`StoreTransaction` (:mod:`._protocol`). A store keeps bytes and keeps them consistent;
it decides nothing.

* :class:`SqliteStore` (:mod:`._sqlite`): one file, the embedded default.
* :class:`PostgresStore` (:mod:`._postgres`): one database shared by several brokers. It needs
  the ``postgres`` extra (psycopg); names load on first use (see ``codemode._lazy``), so psycopg
  is imported only when someone asks for this store.

A new backend implements the Protocol and passes ``tests/ledger/contract``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from codemode._lazy import lazy_exports

_EXPORTS = {
    "ApprovalQuery": "codemode.ledger.stores._protocol",
    "CallQuery": "codemode.ledger.stores._protocol",
    "EventRow": "codemode.ledger.stores._protocol",
    "LedgerStore": "codemode.ledger.stores._protocol",
    "PostgresStore": "codemode.ledger.stores._postgres",
    "RunFacet": "codemode.ledger.stores._protocol",
    "RunQuery": "codemode.ledger.stores._protocol",
    "SqliteStore": "codemode.ledger.stores._sqlite",
    "StoreError": "codemode.ledger.stores._protocol",
    "StoreTransaction": "codemode.ledger.stores._protocol",
    "Synchronous": "codemode.ledger.stores._protocol",
}

__all__, __getattr__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:
    from codemode.ledger.stores._postgres import PostgresStore as PostgresStore
    from codemode.ledger.stores._protocol import ApprovalQuery as ApprovalQuery
    from codemode.ledger.stores._protocol import CallQuery as CallQuery
    from codemode.ledger.stores._protocol import EventRow as EventRow
    from codemode.ledger.stores._protocol import LedgerStore as LedgerStore
    from codemode.ledger.stores._protocol import RunFacet as RunFacet
    from codemode.ledger.stores._protocol import RunQuery as RunQuery
    from codemode.ledger.stores._protocol import StoreError as StoreError
    from codemode.ledger.stores._protocol import StoreTransaction as StoreTransaction
    from codemode.ledger.stores._protocol import Synchronous as Synchronous
    from codemode.ledger.stores._sqlite import SqliteStore as SqliteStore
