"""Opening a ledger: :func:`open_ledger` on a SQLite file, or on PostgreSQL given a URL.

A path opens the embedded ledger, a :class:`SqliteLedger` on one file (:mod:`.stores`). A
``postgresql://`` URL opens a ledger shared by several brokers in that database; its store needs
the ``postgres`` extra (psycopg), which is imported only then.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import cast

from codemode.errors import LedgerError
from codemode.ledger._ledger import DEFAULT_LEASE_S, DEFAULT_MAX_RESULT_BYTES, StoreLedger
from codemode.ledger._owner import new_owner
from codemode.ledger._sqlite_ledger import SqliteLedger
from codemode.ledger._time import Clock, system_clock, to_text
from codemode.ledger.stores import LedgerStore, SqliteStore, Synchronous

DEFAULT_BUSY_TIMEOUT_S = 30.0
POSTGRES_SCHEMES = ("postgresql://", "postgres://")


def is_postgres_url(path: Path | str) -> bool:
    """Whether :func:`open_ledger` takes ``path`` for a PostgreSQL URL rather than a file."""
    return isinstance(path, str) and path.startswith(POSTGRES_SCHEMES)


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

    ``path`` may also be a ``postgresql://`` (or ``postgres://``) URL: the ledger then lives in
    that database (its current schema), shared by every broker that opens it; ``busy_timeout_s``
    bounds the wait for its writers' lock there. It needs psycopg: ``pip install
    'codemode[postgres]'``. The result is then a :class:`StoreLedger` on a ``PostgresStore``,
    not a :class:`SqliteLedger` (whatever the declared type says; see below).

    ``recover`` settles calls left in flight by vanished processes (see
    :meth:`SqliteLedger.recover`). ``store_arguments=False`` keeps only the argument digest
    (no read-back reconciliation then); with ``True`` the arguments are kept with secrets
    redacted. ``clock`` and ``owner`` exist for tests.

    ``synchronous="full"`` (default) fsyncs every commit: a record written before a send
    survives a power cut. ``"normal"`` (WAL) survives any crash of the process, but a power
    cut or OS crash may lose the last few commits, and with them the knowledge that a request
    was sent; it is roughly twice as fast. Choose it only where that trade is acceptable. (On
    PostgreSQL, ``"normal"`` is ``synchronous_commit = off``: the same trade for a server crash.)
    """
    now = clock or system_clock

    def created_at() -> str:
        return to_text(now())

    store: LedgerStore
    if is_postgres_url(path):
        store = _open_postgres_store(
            str(path),
            create=create,
            lock_timeout_s=busy_timeout_s,
            synchronous=synchronous,
            created_at=created_at,
        )
    else:
        store = SqliteStore.open(
            path, create=create, busy_timeout_s=busy_timeout_s, synchronous=synchronous, created_at=created_at
        )
    try:
        ledger = _ledger_class(store)(
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
    # The declared type stays SqliteLedger for the callers written before PostgreSQL, which pass
    # str paths of SQLite files. A URL gives a StoreLedger: the same API, except that its
    # ``store`` is a PostgresStore (no ``pragma``).
    return cast("SqliteLedger", ledger)


def _ledger_class(store: LedgerStore) -> type[StoreLedger]:
    # SqliteLedger only narrows ``store``'s type; the rules are StoreLedger's either way.
    return SqliteLedger if isinstance(store, SqliteStore) else StoreLedger


def _open_postgres_store(
    url: str, *, create: bool, lock_timeout_s: float, synchronous: Synchronous, created_at: Callable[[], str]
) -> LedgerStore:
    try:
        # Imported here: psycopg is an optional dependency, needed only for this kind of ledger.
        # From the module rather than the package's lazy export (cached once loaded), so that
        # whether psycopg is there is decided by this import, on every open.
        from codemode.ledger.stores._postgres import PostgresStore
    except ImportError as exc:
        raise LedgerError(
            f"a PostgreSQL ledger needs psycopg 3, which cannot be imported ({exc}): "
            "pip install 'codemode[postgres]'"
        ) from exc
    return PostgresStore.open(
        url, create=create, lock_timeout_s=lock_timeout_s, synchronous=synchronous, created_at=created_at
    )
