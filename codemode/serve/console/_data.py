"""What the console shows, read from the ledger and the engine (blocking: call from a thread).

Nothing here decides anything but what the operator's :class:`TenantScope` lets them see (other
tenants' runs are not read at all): runs and calls come from the ledger as stored, each call's
evidence chain from :func:`codemode.ledger.run_evidence` (the same chain as ``codemode ledger show
--evidence``), the check from the ledger's own ``verify``, servers and pin drift from the
engine (as ``codemode servers`` and ``CodeMode.drift`` report them).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Protocol

from codemode.config import Config
from codemode.host import ServerStatus
from codemode.ledger import Ledger, RunEvidence, RunFacet, RunRecord, VerifyReport, run_evidence
from codemode.serve.console._scope import TenantScope
from codemode.stubs import VirtualTree

MAX_SHOWN = 500
KNOWN_STATUSES = ("running", "ok", "error", "interrupted")


class FilterError(ValueError):
    """A filter value the console cannot read; the message says which and how to write it."""


class EngineView(Protocol):
    """The part of :class:`~codemode.CodeMode` the console reads."""

    @property
    def config(self) -> Config: ...

    def statuses(self) -> list[ServerStatus]: ...

    def drift(self) -> list[str]: ...

    def approved_tree(self) -> VirtualTree: ...


def _moment(name: str, text: str) -> datetime | None:
    text = text.strip()
    if not text:
        return None
    try:
        moment = datetime.fromisoformat(text)
        # In UTC now: a moment at the edge of the calendar with an offset has no UTC time.
        return moment.astimezone(UTC) if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
    except (ValueError, OverflowError):
        raise FilterError(
            f"{name}: {text!r} is not a date and time; write it as YYYY-MM-DDTHH:MM (UTC)"
        ) from None


@dataclass(frozen=True)
class RunFilter:
    principal: str = ""
    tenant: str = ""
    status: str = ""
    since: datetime | None = None
    until: datetime | None = None
    limit: int = 100

    @classmethod
    def parse(cls, query: Mapping[str, str]) -> RunFilter:
        limit_text = query.get("limit", "").strip() or "100"
        # ASCII digits only: str.isdigit() also accepts "²", which int() refuses.
        if not (limit_text.isascii() and limit_text.isdigit()) or not 1 <= int(limit_text) <= MAX_SHOWN:
            raise FilterError(f"limit: {limit_text!r} is not a whole number from 1 to {MAX_SHOWN}")
        return cls(
            principal=query.get("principal", "").strip(),
            tenant=query.get("tenant", "").strip(),
            status=query.get("status", "").strip(),
            since=_moment("since", query.get("since", "")),
            until=_moment("until", query.get("until", "")),
            limit=int(limit_text),
        )

    def query(self) -> dict[str, str]:
        """The filter as form values (the page fills its inputs and its poll URL from them)."""

        def local(moment: datetime | None) -> str:
            return "" if moment is None else moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M")

        values = {
            "principal": self.principal,
            "tenant": self.tenant,
            "status": self.status,
            "since": local(self.since),
            "until": local(self.until),
        }
        if self.limit != 100:
            values["limit"] = str(self.limit)
        return {k: v for k, v in values.items() if v}


@dataclass(frozen=True)
class RunList:
    runs: list[RunRecord]
    principals: list[str] = field(default_factory=lambda: [])
    tenants: list[str] = field(default_factory=lambda: [])
    statuses: list[str] = field(default_factory=lambda: [])


def list_runs(
    ledger: Ledger, run_filter: RunFilter, scope: TenantScope, *, with_choices: bool = True
) -> RunList:
    """The newest runs that match, filtered by the ledger's own query (so every run is searched,
    however many there are), and, ``with_choices``, every principal, tenant and status that some
    run has (for the filter's pickers): all of them only among the tenants of ``scope``.

    A ``tenant`` filter outside the scope matches nothing, like a tenant without runs: the answer
    must not tell whether another tenant exists."""
    runs = ledger.list_runs(
        limit=run_filter.limit,
        status=run_filter.status or None,
        principal=run_filter.principal or None,
        tenants=_searched_tenants(run_filter.tenant, scope),
        since=run_filter.since,
        until=run_filter.until,
    )
    if not with_choices:
        return RunList(runs=runs)
    return RunList(
        runs=runs,
        principals=_values(ledger, "principal", scope),
        tenants=_values(ledger, "tenant", scope),
        statuses=sorted({*KNOWN_STATUSES, *_values(ledger, "status", scope)}),
    )


def _searched_tenants(wanted: str, scope: TenantScope) -> tuple[str, ...] | None:
    """The tenants whose runs the ledger's one query searches; None: every tenant.

    Empty (no run at all) for a scope without tenants, or a ``wanted`` tenant outside it."""
    if wanted:
        return (wanted,) if scope.sees(wanted) else ()
    return None if scope.every else tuple(scope.names())


def _values(ledger: Ledger, column: RunFacet, scope: TenantScope) -> list[str]:
    return ledger.run_values(column, tenants=None if scope.every else tuple(scope.names()))


def run_detail(ledger: Ledger, run_id: str, scope: TenantScope) -> RunEvidence | None:
    """The run with every call's evidence chain; None when the ledger has no such run, or when
    it is another tenant's (so a run outside the scope looks exactly like a missing one)."""
    run = ledger.get_run(run_id)
    if run is None or not scope.sees(run.tenant):
        return None
    return run_evidence(ledger, run)


def verify(ledger: Ledger) -> VerifyReport:
    return ledger.verify()


@dataclass(frozen=True)
class ServerRow:
    status: ServerStatus
    drift: list[str]


def servers(engine: EngineView) -> list[ServerRow]:
    """Every configured server with its state, and the pinned tools that drifted on it."""
    drift = engine.drift()
    rows: list[ServerRow] = []
    for status in engine.statuses():
        mine = [entry for entry in drift if entry.startswith(f"{status.name}/")]
        rows.append(ServerRow(status, mine))
    return rows
