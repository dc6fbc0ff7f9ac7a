"""The embedded ledger: :class:`StoreLedger` on one SQLite file (see :mod:`._sqlite_store`)."""

from __future__ import annotations

from pathlib import Path

from codemode.ledger._ledger import DEFAULT_LEASE_S, DEFAULT_MAX_RESULT_BYTES, StoreLedger
from codemode.ledger._owner import new_owner
from codemode.ledger._sqlite_store import SqliteStore, Synchronous
from codemode.ledger._time import Clock, system_clock, to_text

DEFAULT_BUSY_TIMEOUT_S = 30.0

__all__ = [
    "DEFAULT_BUSY_TIMEOUT_S",
    "DEFAULT_LEASE_S",
    "DEFAULT_MAX_RESULT_BYTES",
    "SqliteLedger",
    "open_ledger",
]


class SqliteLedger(StoreLedger):
    """The operation ledger on one SQLite file. Thread-safe; safe across processes.

    Create it with :func:`open_ledger`. All methods block (file I/O and, under contention,
    waiting for SQLite's write lock); call them from a worker thread in async code.
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


def open_ledger(
    path: Path | str,
    *,
    create: bool = True,
    recover: bool = True,
    store_arguments: bool = True,
    max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES,
    lease_s: float = DEFAULT_LEASE_S,
    busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S,
    synchronous: Synchronous = "full",
    clock: Clock | None = None,
    owner: str | None = None,
) -> SqliteLedger:
    """Open (and with ``create``, create) the ledger at ``path``; ``":memory:"`` for a private one.

    ``recover`` settles calls left in flight by vanished processes (see
    :meth:`SqliteLedger.recover`). ``store_arguments=False`` keeps only the argument digest
    (no read-back reconciliation then); with ``True`` the arguments are kept with secrets
    redacted. ``clock`` and ``owner`` exist for tests.

    ``synchronous="full"`` (default) fsyncs every commit: a record written before a send
    survives a power cut. ``"normal"`` (WAL) survives any crash of the process, but a power
    cut or OS crash may lose the last few commits, and with them the knowledge that a request
    was sent; it is roughly twice as fast. Choose it only where that trade is acceptable.
    """
    now = clock or system_clock
    store = SqliteStore.open(
        path,
        create=create,
        busy_timeout_s=busy_timeout_s,
        synchronous=synchronous,
        created_at=lambda: to_text(now()),
    )
    try:
        ledger = SqliteLedger(
            store,
            clock=now,
            owner=owner or new_owner(),
            lease_s=lease_s,
            store_arguments=store_arguments,
            max_result_bytes=max_result_bytes,
        )
        if recover:
            ledger.recover()
    except BaseException:
        store.close()
        raise
    return ledger
