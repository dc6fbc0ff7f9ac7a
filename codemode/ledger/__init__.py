"""The operation ledger: every run and tool call, recorded before it is sent, hash-chained.

It is the side-effects gate's memory (its execution record):

* **Idempotency.** A call with a key (scoped ``tenant:principal:server:tool:key``) runs once.
  The same key and arguments later replay the stored first outcome, errors included; other
  arguments are a conflict; a call still running makes others wait (one lease per key).
* **Unknown outcomes.** A request sent without an answer (timeout, lost stream, broker
  crash) becomes ``unknown`` and is never retried automatically; it is reconciled from a
  receipt or a read-back (``resolve``, ``codemode ledger reconcile``).
* **Approvals** are stored and consumed once, atomically, bound to call/tool, arguments,
  risk and expiry.
* **Plans** of dry runs (``codemode run --plan``) are stored once, bound to the program's
  digest, the principal and tenant, with an expiry, for any process to find.
* **Workspaces' metadata** (owner, live version, size, last use) for every replica to list and
  prune alike; their files stay in a directory.
* **Approval tickets**: calls of ``codemode serve`` runs waiting for an operator, for every
  replica's console to list and answer (first answer wins); the approval itself is recorded as
  any other.
* **Sandbox sessions** (``run_code``'s ``session_id``): which ``serve`` replica holds each open
  one, claimed in one write, so a run naming a session another replica holds is refused by name.
* **MCP sessions** of ``codemode serve`` are bound to the principal and tenant that opened
  them, once, where every replica sharing the ledger reads it.
* **Tamper-evidence.** Every change is an event in a hash chain; the tables are derived from
  the events, and ``verify`` proves both. See :mod:`codemode.ledger._chain` for the limits.

The broker's order for one tool call (all methods block: run them with ``anyio.to_thread``)::

    gate denial            → mark_denied(intent, gate=…, reason=…)          (nothing sent)
    r = reserve(intent)    # or: await reserve_waiting(ledger, intent, wait_s=…)
    Fresh      → mark_sent(r.call_id)  (skip if reserve(send=True); if it raises, do NOT send)
                 → send → complete(r.call_id, outcome, receipt=…)        # any answer
                        | mark_unknown(r.call_id, why)                    # post-send failure
                        | mark_refused(r.call_id, why, retry_after_s=…)   # 429/503, not run
    Replay     → return r.outcome (nothing sent)
    InFlight   → wait_for(r.call_id, t), then reserve again (reserve_waiting does this)
    Conflict / Unresolved → CallFailed(r.reason) (already recorded as denied; nothing sent)

See :mod:`codemode.ledger._retry` for which failures may be retried.

Layout: the rules are backend-neutral (:mod:`._states` is the one table of call states;
:mod:`._reservations`, :mod:`._calls`, :mod:`._leases`, :mod:`._approvals`, :mod:`._runs`,
:mod:`._sessions`, :mod:`._queries`, :mod:`._events`, :mod:`._verify` implement them) and talk
to storage only through :class:`LedgerStore`. The stores live in :mod:`.stores`:
:class:`SqliteStore` is the embedded one, ``PostgresStore`` the shared one; another backend
implements the Protocol and passes ``tests/ledger/contract``. :func:`open_ledger` (:mod:`._open`)
picks the store from the path.
"""

from codemode.ledger._api import Ledger
from codemode.ledger._archive import ArchiveResult, archive_ledger
from codemode.ledger._async import ReadBack, ReadBackVerdict, reserve_waiting, resolve_with_read_back
from codemode.ledger._digest import approval_digest, arguments_digest, escape_part, scoped_key
from codemode.ledger._errors import LeaseLostError, LedgerStateError
from codemode.ledger._evidence import (
    CallEvidence,
    EvidenceLink,
    RunEvidence,
    filter_summary,
    run_evidence,
    single_call_evidence,
)
from codemode.ledger._input_rounds import InputRound, InputRoundBook, round_key
from codemode.ledger._ledger import DEFAULT_LEASE_S, DEFAULT_MAX_RESULT_BYTES, StoreLedger
from codemode.ledger._models import (
    CALL_STATES,
    IN_FLIGHT,
    KEY_FREEING,
    KEY_HOLDING,
    REPLAYABLE,
    ApprovalConsumed,
    ApprovalRecord,
    ApprovalRefused,
    ApprovalUse,
    CallIntent,
    CallRecord,
    CallState,
    Completion,
    Conflict,
    Fresh,
    InFlight,
    LedgerEvent,
    RecoveryReport,
    Replay,
    Reservation,
    Resolution,
    RunRecord,
    SessionBinding,
    Unresolved,
    VerifyProblem,
    VerifyReport,
)
from codemode.ledger._open import open_ledger
from codemode.ledger._plans import PlanRecord, plan_digest
from codemode.ledger._quotas import MONEY_UNIT, QuotaBook, QuotaRefusal, SlotLimit, WindowLimit
from codemode.ledger._reads import ReadRecord
from codemode.ledger._retry import RetryClass, classify_failure
from codemode.ledger._sandbox_sessions import (
    SandboxSessionBook,
    SandboxSessionRecord,
    SessionClaim,
    sandbox_session_key,
)
from codemode.ledger._skills import SkillBook, SkillVersion
from codemode.ledger._sqlite_ledger import SqliteLedger
from codemode.ledger._states import CALL_EVENTS, CALL_TRANSITIONS
from codemode.ledger._tickets import ApprovalTicket, ApprovalTicketBook, TicketClosedError, TicketState
from codemode.ledger._time import Clock, system_clock
from codemode.ledger._workspaces import WorkspaceBook, WorkspaceRecord
from codemode.ledger.stores import (
    ApprovalQuery,
    CallQuery,
    EventRow,
    LedgerStore,
    RunFacet,
    RunQuery,
    SqliteStore,
    StoreError,
    StoreTransaction,
)

__all__ = [
    "CALL_EVENTS",
    "CALL_STATES",
    "CALL_TRANSITIONS",
    "DEFAULT_LEASE_S",
    "DEFAULT_MAX_RESULT_BYTES",
    "IN_FLIGHT",
    "KEY_FREEING",
    "KEY_HOLDING",
    "MONEY_UNIT",
    "REPLAYABLE",
    "ApprovalConsumed",
    "ApprovalQuery",
    "ApprovalRecord",
    "ApprovalRefused",
    "ApprovalTicket",
    "ApprovalTicketBook",
    "ApprovalUse",
    "ArchiveResult",
    "CallEvidence",
    "CallIntent",
    "CallQuery",
    "CallRecord",
    "CallState",
    "Clock",
    "Completion",
    "Conflict",
    "EventRow",
    "EvidenceLink",
    "Fresh",
    "InFlight",
    "InputRound",
    "InputRoundBook",
    "LeaseLostError",
    "Ledger",
    "LedgerEvent",
    "LedgerStateError",
    "LedgerStore",
    "PlanRecord",
    "QuotaBook",
    "QuotaRefusal",
    "ReadBack",
    "ReadBackVerdict",
    "ReadRecord",
    "RecoveryReport",
    "Replay",
    "Reservation",
    "Resolution",
    "RetryClass",
    "RunEvidence",
    "RunFacet",
    "RunQuery",
    "RunRecord",
    "SandboxSessionBook",
    "SandboxSessionRecord",
    "SessionBinding",
    "SessionClaim",
    "SkillBook",
    "SkillVersion",
    "SlotLimit",
    "SqliteLedger",
    "SqliteStore",
    "StoreError",
    "StoreLedger",
    "StoreTransaction",
    "TicketClosedError",
    "TicketState",
    "Unresolved",
    "VerifyProblem",
    "VerifyReport",
    "WindowLimit",
    "WorkspaceBook",
    "WorkspaceRecord",
    "approval_digest",
    "archive_ledger",
    "arguments_digest",
    "classify_failure",
    "escape_part",
    "filter_summary",
    "open_ledger",
    "plan_digest",
    "reserve_waiting",
    "resolve_with_read_back",
    "round_key",
    "run_evidence",
    "sandbox_session_key",
    "scoped_key",
    "single_call_evidence",
    "system_clock",
]
