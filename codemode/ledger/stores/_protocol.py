"""What a ledger needs from its storage: the contract a second backend implements.

The ledger's rules (the call state machine, idempotency decisions, leases, the hash chain,
verify and recovery) live in backend-neutral modules that talk only to these two Protocols.
A store keeps bytes and keeps them consistent; it decides nothing. :mod:`._sqlite` is
the embedded implementation; ``tests/ledger/contract`` is the suite any store must pass.

What a store must guarantee:

* **One writer at a time, everywhere.** Inside ``transaction(write=True)`` the caller reads,
  decides and writes; no other write transaction on the same store (another thread, another
  process, another host for a server database) may interleave. SQLite gets this from
  ``BEGIN IMMEDIATE``; PostgreSQL would take a transaction-level advisory lock (or run
  SERIALIZABLE and retry). ``reserve``'s "at most one execution per key" rests on it.
* **All or nothing.** An exception inside the ``with`` block rolls everything back and is
  re-raised; leaving it normally commits. ``durable=False`` may skip the flush to stable
  storage for that commit only (the next durable commit covers it).
* **Consistent reads.** ``transaction(write=False)`` sees one snapshot for all its queries.
* **Exact values.** Columns hold text, integers or null and give back exactly what was stored.
* **Its own failures as :class:`StoreError`** (a :class:`codemode.errors.LedgerError`), never
  a driver exception.
* **The schema and its guard rails**: the tables of :mod:`codemode.ledger._schema` plus
  ``events`` and the head; a unique ``(idem_key, attempt)`` and at most one row per
  ``idem_key`` in a ``KEY_HOLDING`` state, so a bug above fails loudly instead of executing twice.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Literal, Protocol

from codemode.errors import LedgerError
from codemode.ledger._reduce import Row
from codemode.ledger._schema import Table


class StoreError(LedgerError):
    """The store could not do what was asked (I/O, a locked or damaged file, a lost connection)."""


@dataclass(frozen=True, slots=True)
class EventRow:
    """One stored event, exactly as the hash chain covers it (``payload`` is canonical JSON text)."""

    seq: int
    at: str
    kind: str
    subject: str
    payload: str
    prev_hash: str
    hash: str


@dataclass(frozen=True, slots=True)
class CallQuery:
    """A selection of calls, ordered by ``created_at`` and then by insertion order."""

    run_id: str | None = None
    states: frozenset[str] | None = None
    receipt: str | None = None
    server: str | None = None
    with_receipt: bool = False
    """Only calls that recorded a receipt (any non-empty one)."""
    compensates: frozenset[str] | None = None
    """Only compensations of these calls (``compensates IN (...)``; empty: none)."""
    newest_first: bool = False
    limit: int | None = None


@dataclass(frozen=True, slots=True)
class RunQuery:
    """A selection of runs, newest first (``started_at``, then ``run_id``, descending).

    ``since`` and ``until`` are ledger times (:func:`codemode.ledger._time.to_text`: fixed width,
    so they compare as text), both inclusive. ``tenants`` keeps the runs of any of those tenants
    (``tenant IN (...)``), in the same order and under the same ``limit`` as any other filter; an
    empty ``tenants`` selects no run at all (never every run). With ``tenant`` too, both apply."""

    status: str | None = None
    principal: str | None = None
    tenant: str | None = None
    since: str | None = None
    until: str | None = None
    limit: int | None = None
    tenants: tuple[str, ...] | None = None

    def conditions(self) -> list[tuple[str, str, str | tuple[str, ...]]]:
        """``(column, operator, value)`` for each filter set; each store writes them in its dialect.

        The operator is ``=``, ``>=`` or ``<=`` with a ``str`` value, or ``in`` with a tuple of
        them (``tenants``; possibly empty, which no row matches). A store that does not know an
        operator must fail, not drop the condition."""
        wanted: tuple[tuple[str, str, str | tuple[str, ...] | None], ...] = (
            ("status", "=", self.status),
            ("principal", "=", self.principal),
            ("tenant", "=", self.tenant),
            ("tenant", "in", None if self.tenants is None else tuple(self.tenants)),
            ("started_at", ">=", self.since),
            ("started_at", "<=", self.until),
        )
        return [(column, operator, value) for column, operator, value in wanted if value is not None]


Synchronous = Literal["full", "normal"]
"""How a store's commits reach stable storage: every one flushed (``full``), or a crash of the
machine (SQLite) or the server (PostgreSQL) may lose the last few (``normal``); see
:func:`codemode.ledger.open_ledger`."""

QUOTA_SLOT_COLUMNS = ("run_id", "principal", "tenant", "owner", "expires_at")
"""A concurrent-run slot of ``[policy.quotas]`` (quotas, issue 42), as a store keeps it."""

INPUT_ROUND_COLUMNS = (
    "round_key",
    "principal",
    "tenant",
    "replica",
    "state",
    "asked_at",
    "expires_at",
    "heartbeat_at",
    "answer_json",
    "outcome_json",
)
"""An input round of a stateless client's run (``codemode.ledger._input_rounds``), as a store keeps it."""

RunFacet = Literal["principal", "tenant", "status"]
RUN_FACETS: tuple[RunFacet, ...] = ("principal", "tenant", "status")
"""The run columns :meth:`StoreTransaction.run_values` lists (the only ones it accepts)."""


@dataclass(frozen=True, slots=True)
class ApprovalQuery:
    """Unused pre-issued approvals (``call_id`` null) for exactly this call, unexpired at
    ``usable_at`` (``expires_at > usable_at``), in issue order."""

    tenant: str
    principal: str
    server: str
    tool: str
    args_digest: str
    usable_at: str


class StoreTransaction(Protocol):
    """The primitives available inside one transaction. Table and column names come only from
    :mod:`codemode.ledger._schema` (the reducer has checked every field name before a write
    reaches here)."""

    appended: tuple[int, str] | None
    """``(seq, hash)`` of the last event this transaction appended, which is then also the head's
    and the last stored event's; None before its first append."""

    def ledger_id(self) -> str | None:
        """The id minted when the store was created (seeds the chain's genesis); None if lost."""
        ...

    # ── the event log and its head ──
    def head(self) -> tuple[int, str] | None:
        """``(seq, hash)`` the head records (``(0, genesis)`` for a new store); None if it is gone."""
        ...

    def last_event(self) -> tuple[int, str] | None:
        """``(seq, hash)`` of the highest-numbered event actually stored; None if there is none."""
        ...

    def append(self, event: EventRow) -> None:
        """Store the event and move the head to it. The caller has checked the chain."""
        ...

    def events(self, *, subject: str | None = None, limit: int | None = None) -> Iterator[EventRow]:
        """Events in ``seq`` order, all or one subject's. Consume it inside the transaction."""
        ...

    def event_hash(self, seq: int) -> str | None:
        """The stored hash of event ``seq`` (to check an anchor)."""
        ...

    # ── retention (issue 42): the prefix of the log moved to archive segments ──
    def archived(self) -> tuple[int, str] | None:
        """``(seq, hash)`` of the last event moved out to an archive segment; None if none was."""
        ...

    def drop_archived(self, through: tuple[int, str]) -> None:
        """Delete events ``1..through[0]`` (already written to a segment) and record ``through``
        as the archive boundary, so the remaining log still links to it. The only delete of
        events a store allows: its append-only guard stays in force for everything else."""
        ...

    # ── the derived tables ──
    def row(self, table: Table, key: str) -> Row | None:
        """The row with this primary key, every column of
        :data:`codemode.ledger._schema.COLUMNS`, or None."""
        ...

    def insert(self, table: Table, row: Row) -> None:
        """Add a row (every column given)."""
        ...

    def update(self, table: Table, key: str, fields: Mapping[str, str | int | None]) -> None:
        """Set these columns of the row with this primary key."""
        ...

    def rows(self, table: Table) -> Iterator[Row]:
        """Every row of a table, in no particular order (for verify)."""
        ...

    # ── the few query shapes the ledger needs ──
    def key_attempt(self, idem_key: str, *, latest: bool) -> Row | None:
        """The call holding attempt 1 of a key, or (``latest``) its highest attempt."""
        ...

    def calls(self, query: CallQuery) -> list[Row]: ...

    def runs(self, query: RunQuery) -> list[Row]:
        """The runs ``query`` selects, newest first (``started_at``, then ``run_id``, descending)."""
        ...

    def run_values(
        self, column: RunFacet, tenant: str | None = None, *, tenants: tuple[str, ...] | None = None
    ) -> list[str]:
        """Every distinct value of ``column`` (one of :data:`RUN_FACETS`) among the runs, sorted;
        with ``tenant``, among that tenant's runs only; with ``tenants``, among the runs of any of
        them (none at all for an empty tuple); with both, both apply."""
        ...

    def approvals(self, query: ApprovalQuery) -> list[Row]: ...

    # ── quotas (issue 42): counters and run slots, kept outside the hash chain ──
    def quota_usage(self, keys: Sequence[str]) -> dict[str, tuple[str, int]]:
        """``key -> (window_start, used)`` for those of ``keys`` that have a counter."""
        ...

    def set_quota_usage(self, key: str, window_start: str, used: int) -> None:
        """Create the counter ``key``, or overwrite it."""
        ...

    def quota_slots(self, principal: str, tenant: str) -> list[Row]:
        """Every run slot held by ``principal`` or in ``tenant`` (:data:`QUOTA_SLOT_COLUMNS`),
        expired or not: the caller decides which are live."""
        ...

    def hold_quota_slot(self, slot: Mapping[str, str]) -> None:
        """Add a run slot (:data:`QUOTA_SLOT_COLUMNS`), or move an existing one's ``expires_at``."""
        ...

    def drop_quota_slots(self, run_ids: Sequence[str]) -> None:
        """Remove these runs' slots (those that exist)."""
        ...

    # ── end of quotas ──

    # ── input rounds (issue 42): a waiting run's questions relayed between serve replicas ──
    def input_round(self, key: str) -> Row | None:
        """The round ``key`` (every column of :data:`INPUT_ROUND_COLUMNS`), or None."""
        ...

    def input_rounds(self, replica: str, state: str) -> list[Row]:
        """The rounds held by ``replica`` in ``state``."""
        ...

    def save_input_round(self, row: Mapping[str, str | None]) -> None:
        """Insert the round, or replace every column of the one with its key."""
        ...

    def touch_input_rounds(self, keys: Sequence[str], at: str) -> None:
        """Set ``heartbeat_at`` of these rounds (the replica holding them is alive)."""
        ...

    def drop_input_rounds(self, before: str) -> int:
        """Delete the rounds whose last heartbeat is before ``before``; how many."""
        ...

    # ── end of input rounds ──

    def integrity_problems(self) -> list[str]:
        """What the store's own consistency check finds (empty: nothing)."""
        ...


class LedgerStore(Protocol):
    """A place to keep one ledger; see the module docstring for what it must guarantee."""

    @property
    def location(self) -> str:
        """Where it lives, for messages (a path, a DSN without its password)."""
        ...

    def transaction(self, *, write: bool, durable: bool = True) -> AbstractContextManager[StoreTransaction]:
        """A write transaction (exclusive across every user of the store) or a read snapshot."""
        ...

    def commits(self) -> int:
        """How many write transactions this store object has committed (for :meth:`wait_for_commit`)."""
        ...

    def wait_for_commit(self, seen: int, timeout_s: float) -> None:
        """Block until :meth:`commits` exceeds ``seen`` or ``timeout_s`` passes, whichever is first.

        Commits by other processes need not wake it: callers poll with a short timeout.
        """
        ...

    def close(self) -> None:
        """Release the store; later transactions raise :class:`StoreError`. Idempotent."""
        ...
