"""The embedded ledger: :class:`StoreLedger` on one SQLite file (see :mod:`.stores`).

The rules are all :class:`StoreLedger`'s; this class only says which store it holds, so that
callers who opened a file may reach SQLite's own tools (``store.pragma``) with their types.
"""

from __future__ import annotations

from codemode.ledger._ledger import DEFAULT_LEASE_S, DEFAULT_MAX_RESULT_BYTES, StoreLedger
from codemode.ledger._time import Clock
from codemode.ledger.stores import SqliteStore


class SqliteLedger(StoreLedger):
    """The operation ledger on one SQLite file. Thread-safe; safe across processes.

    Create it with :func:`codemode.ledger.open_ledger`. All methods block (file I/O and, under
    contention, waiting for SQLite's write lock); call them from a worker thread in async code.
    """

    _sqlite: SqliteStore

    def __init__(
        self,
        store: SqliteStore,
        *,
        clock: Clock,
        owner: str,
        lease_s: float = DEFAULT_LEASE_S,
        store_arguments: bool = True,
        max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES,
    ) -> None:
        super().__init__(
            store,
            clock=clock,
            owner=owner,
            lease_s=lease_s,
            store_arguments=store_arguments,
            max_result_bytes=max_result_bytes,
        )
        self._sqlite = store

    @property
    def store(self) -> SqliteStore:
        return self._sqlite

    def __enter__(self) -> SqliteLedger:
        return self
