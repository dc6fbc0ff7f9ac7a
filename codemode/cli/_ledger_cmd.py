"""``codemode ledger list|show|verify|reconcile``: read, check and settle the operation ledger."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
import click
from pydantic import BaseModel
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from codemode._redaction import redact_secrets, redact_value
from codemode.calls import CallFailed, CallPlanned, ToolError
from codemode.cli._archive_cmd import archive
from codemode.cli._common import (
    EXIT_USAGE,
    config_option,
    fail,
    handle_errors,
    json_option,
    load,
    print_json,
    stderr,
    stdout,
)
from codemode.cli._compensate_cmd import compensate, failed_compensations
from codemode.cli._evidence import show_evidence
from codemode.engine import recorded_outcome
from codemode.ledger import (
    CALL_STATES,
    CallRecord,
    CallState,
    LedgerEvent,
    RunRecord,
    SqliteLedger,
    filter_summary,
    open_ledger,
    run_evidence,
    single_call_evidence,
)

_STATE_STYLE: dict[str, str] = {
    "reserved": "cyan",
    "sent": "cyan",
    "succeeded": "green",
    "failed": "red",
    "refused": "yellow",
    "unknown": "bold magenta",
    "abandoned": "dim",
    "denied": "red",
    "replayed": "blue",
    "reconciled_succeeded": "green",
    "reconciled_failed": "yellow",
}


def _open(config_path: Path | None, *, recover: bool = True) -> SqliteLedger:
    config = load(config_path)
    return open_ledger(config.ledger_location(), create=False, recover=recover)


def _when(moment: Any) -> str:
    return "-" if moment is None else moment.strftime("%Y-%m-%d %H:%M:%S")


def _styled(state: str) -> str:
    return f"[{_STATE_STYLE.get(state, 'white')}]{state}[/]"


def _dump(record: BaseModel) -> dict[str, Any]:
    return record.model_dump(mode="json")


def _detail(call: CallRecord, limit: int = 70) -> str:
    if call.state == "replayed":
        return f"replay of {call.replay_of}"
    if call.receipt:
        return f"receipt {call.receipt}"
    if call.reason:
        return call.reason if len(call.reason) <= limit else call.reason[: limit - 1] + "…"
    outcome = call.outcome()
    if isinstance(outcome, ToolError | CallFailed):
        text = outcome.message if isinstance(outcome, ToolError) else outcome.reason
        return text[:limit]
    return ""


def _calls_table(calls: list[CallRecord], wide: bool = False) -> Table:
    table = Table(show_edge=False, header_style="bold")
    # Ids are never cut (they are copied into 'ledger show'): the id column takes its full width
    # and the other columns wrap or shorten around it.
    table.add_column("call", no_wrap=True, min_width=max(len(c.call_id) for c in calls))
    for column in ("state", "tool", "actor", "created"):
        table.add_column(column, overflow="fold")
    table.add_column("detail", min_width=6, ratio=1)
    for call in calls:
        table.add_row(
            escape(call.call_id),
            _styled(call.state),
            escape(f"{call.server}/{call.tool}"),
            escape(f"{call.principal}@{call.tenant}"),
            _when(call.created_at),
            escape(redact_secrets(_detail(call, 100_000 if wide else 70))[0]),
        )
    return table


def _runs_table(runs: list[RunRecord]) -> Table:
    table = Table(show_edge=False, header_style="bold")
    table.add_column("run", no_wrap=True, min_width=max(len(r.run_id) for r in runs))
    for column in ("status", "actor", "started", "finished"):
        table.add_column(column, overflow="fold")
    for run in runs:
        table.add_row(
            escape(run.run_id),
            escape(run.status),
            escape(f"{run.principal}@{run.tenant}"),
            _when(run.started_at),
            _when(run.finished_at),
        )
    return table


@click.group()
def ledger() -> None:
    """Inspect, verify and reconcile the operation ledger.

    The ledger (a SQLite file, [ledger] path in codemode.toml, default codemode.db beside it)
    records every run and every tool call before it is sent and completes it after: who
    called what with which arguments (as a digest), the approval used, the idempotency key,
    the result or error, the external receipt. Every change is an event in a hash chain.

    \b
    codemode ledger list                  recent calls (--runs for runs)
    codemode ledger show ID               one call with its history, or one run with its calls
    codemode ledger verify                check the hash chain and every table (exit 1 if tampered)
    codemode ledger reconcile             calls whose outcome is unknown, and what to do
    codemode ledger reconcile ID --failed --evidence "no note in CRM at 10:02"
    codemode ledger compensate RUN        undo a failed run's side effects (--dry-run first)
    codemode ledger archive --before DATE move old events to archive files (verify --archive DIR)
    """


@ledger.command(name="list")
@config_option
@json_option
@click.option("--run", "run_id", metavar="RUN", help="Only the calls of this run.")
@click.option(
    "--state",
    type=click.Choice(CALL_STATES),
    help="Only calls in this state (e.g. unknown, denied, replayed).",
)
@click.option(
    "--limit", type=click.IntRange(1, 100_000), default=50, show_default=True, help="At most N rows."
)
@click.option("--runs", "show_runs", is_flag=True, help="List runs instead of calls.")
@click.option(
    "--wide", is_flag=True, help="Never shorten any column (lines may be longer than the terminal)."
)
@handle_errors
def list_cmd(
    config_path: Path | None,
    as_json: bool,
    run_id: str | None,
    state: CallState | None,
    limit: int,
    show_runs: bool,
    wide: bool,
) -> None:
    """List recent calls, newest first (or runs, with --runs).

    Ids are printed whole, ready to copy into 'codemode ledger show'; --wide prints every
    column whole, and --json gives everything.
    """
    out = Console(soft_wrap=True, width=10_000) if wide else stdout
    with _open(config_path) as store:
        if show_runs:
            runs = store.list_runs(limit=limit)
            if as_json:
                print_json({"ledger": store.location, "runs": [_dump(r) for r in runs]})
            elif runs:
                out.print(_runs_table(runs))
            else:
                stdout.print("no runs recorded yet", highlight=False)
            return
        calls = store.list_calls(run_id=run_id, state=state, limit=limit)
        if as_json:
            print_json({"ledger": store.location, "calls": [_dump(c) for c in calls]})
        elif calls:
            out.print(_calls_table(calls, wide))
        else:
            stdout.print("no calls match", highlight=False)


def _redacted(call: CallRecord) -> CallRecord:
    """The call as shown: secrets hidden even in rows an older codemode stored in clear."""

    def text(value: str | None) -> str | None:
        return None if value is None else redact_secrets(value)[0]

    return call.model_copy(
        update={
            "arguments": redact_value(call.arguments),
            "result": redact_value(call.result),
            "reason": text(call.reason),
            "evidence": text(call.evidence),
        }
    )


def _redacted_event(event: LedgerEvent) -> LedgerEvent:
    return event.model_copy(update={"payload": redact_value(event.payload)})


def _redacted_run(run: RunRecord) -> RunRecord:
    return run.model_copy(update={"summary": redact_value(run.summary)})


def _input_line(answer: dict[str, Any]) -> str:
    """One request for input during the call: what was answered, by whom, when (never the content)."""
    kind, action = answer.get("kind", "input"), answer.get("action", "?")
    return f"{kind} {action} by {answer.get('answered_by', '?')} at {answer.get('at', '?')}"


def _print_call(call: CallRecord, events: list[LedgerEvent]) -> None:
    fields: list[tuple[str, Any]] = [
        ("call", call.call_id),
        ("state", _styled(call.state)),
        ("run", call.run_id),
        ("attempt", call.attempt),
        ("actor", f"{call.principal}@{call.tenant}"),
        ("tool", f"{call.server}/{call.tool}"),
        ("schema hash", call.schema_hash),
        ("tool version", call.tool_version),
        ("skill", call.skill),
        ("arguments digest", call.args_digest),
        ("arguments", None if call.arguments is None else str(call.arguments)),
        ("resource scope", call.resource_scope),
        ("approval", call.approval_id),
        ("idempotency key", call.idempotency_key),
        ("trace", call.trace_id),
        ("gate", call.gate),
        ("reason", call.reason),
        ("replay of", call.replay_of),
        ("outcome", call.outcome_kind),
        ("result", None if call.result is None else str(call.result)[:500]),
        ("result size", None if call.result_bytes is None else f"{call.result_bytes} bytes"),
        ("result filter", None if call.filter_report is None else filter_summary(call.filter_report)),
        ("input asked", "; ".join(_input_line(answer) for answer in call.inputs) or None),
        ("receipt", call.receipt),
        ("evidence", call.evidence),
        ("resolved by", call.resolved_by),
        ("created", _when(call.created_at)),
        ("sent", _when(call.sent_at) if call.sent_at else None),
        ("completed", _when(call.completed_at) if call.completed_at else None),
    ]
    for label, value in fields:
        if value is not None:
            text = value if label == "state" else escape(str(value))
            stdout.print(f"[bold]{label:>17}[/]  {text}", highlight=False)
    stdout.print("\n[bold]history[/]", highlight=False)
    for event in events:
        stdout.print(f"  #{event.seq:<6} {_when(event.at)}  {event.kind}", highlight=False)


@ledger.command()
@config_option
@json_option
@click.option(
    "--evidence",
    is_flag=True,
    help="Print each call's evidence chain instead, marking every missing or contradicting link.",
)
@click.argument("item_id", metavar="CALL_ID|RUN_ID")
@handle_errors
def show(config_path: Path | None, as_json: bool, evidence: bool, item_id: str) -> None:
    """Show one call with its history, or one run with its calls.

    For a call: every field of its execution record (actor, tool and schema hash, argument
    digest and arguments, scope, approval, key, outcome, receipt, evidence) and the events
    that made it. For a run: its status and summary, and its calls in order.

    With --evidence: for each call, in order, the chain production acceptance asks for (trace
    id, principal and tenant, server and tool version, schema hash, argument digest, approval,
    external receipt, result filtering, final outcome), each link marked ok, none, n/a,
    pending, or as a gap: MISSING, UNVERIFIED or MISMATCH. A write's receipt is expected only
    from a server that gives them (a call to it in this ledger recorded one); from any other
    server it is n/a, not a gap. It is built from the ledger alone; run 'codemode ledger
    verify' to know that the ledger itself was not edited.
    """
    with _open(config_path) as store:
        if evidence:
            _show_evidence(store, item_id, as_json)
            return
        call = store.get_call(item_id)
        if call is not None:
            call = _redacted(call)
            events = [_redacted_event(e) for e in store.events(call.call_id)]
            if as_json:
                print_json({"call": _dump(call), "events": [_dump(e) for e in events]})
            else:
                _print_call(call, events)
            return
        run = store.get_run(item_id)
        if run is None:
            fail(f"no call or run {item_id!r} in {store.location}", hint="codemode ledger list")
        run = _redacted_run(run)
        calls = [_redacted(c) for c in store.list_calls(run_id=run.run_id, limit=100_000, newest_first=False)]
        summary = run.summary or {}
        if as_json:
            outcome = recorded_outcome(store, run.run_id, run.status, summary.get("verified"))
            print_json({"run": _dump(run), "outcome": outcome, "calls": [_dump(c) for c in calls]})
            return
        stdout.print(_runs_table([run]))
        stdout.print(f"outcome: {recorded_outcome(store, run.run_id, run.status, summary.get('verified'))}")
        if run.summary:
            stdout.print(f"summary: {escape(str(run.summary))}", highlight=False)
        stdout.print(_calls_table(calls) if calls else "no calls", highlight=False)


def _show_evidence(store: SqliteLedger, item_id: str, as_json: bool) -> None:
    call = store.get_call(item_id)
    if call is not None:
        show_evidence(store.location, single_call_evidence(store, call), as_json)
        return
    run = store.get_run(item_id)
    if run is None:
        fail(f"no call or run {item_id!r} in {store.location}", hint="codemode ledger list --runs")
    show_evidence(store.location, run_evidence(store, run), as_json)


def _parse_anchor(value: str | None) -> tuple[int, str] | None:
    if value is None:
        return None
    seq, sep, digest = value.partition(":")
    if not sep or not seq.isdigit() or len(digest) != 64:
        raise click.BadParameter("write SEQ:HASH as printed by an earlier 'codemode ledger verify'")
    return int(seq), digest


@ledger.command()
@config_option
@json_option
@click.option(
    "--anchor",
    metavar="SEQ:HASH",
    help="A head printed by an earlier verify and kept outside this machine: fail if history up "
    "to it was rewritten (the one thing the chain alone cannot catch).",
)
@click.option(
    "--archive",
    "archive_path",
    type=click.Path(file_okay=False, path_type=Path),
    help="The directory of 'ledger archive': check its segments and the database as one chain.",
)
@handle_errors
def verify(config_path: Path | None, as_json: bool, anchor: str | None, archive_path: Path | None) -> None:
    """Check that no record was edited, deleted or added.

    Recomputes the hash chain over every event, checks the head (a truncated log fails), and
    re-derives runs, calls and approvals from the events to compare them with the tables.
    Does not change the file. Exit status 1 on any problem, listing what and where.

    After 'ledger archive', --archive DIR checks its segments and the database as one chain.

    Limit: someone with write access who rewrites the whole file consistently (events,
    hashes, head, tables) passes this check; keep a head elsewhere and pass it as --anchor.
    """
    parsed = _parse_anchor(anchor)
    with _open(config_path, recover=False) as store:
        report = store.verify(anchor=parsed, archive=archive_path)
        location = store.location
    if as_json:
        print_json({"ledger": location, **_dump(report)})
    elif report.ok:
        stdout.print(
            f"[green]ok[/]: {report.events} events, {report.rows_checked} rows consistent; "
            f"head {report.head_seq}:{report.head_hash}",
            highlight=False,
        )
        if report.archived_seq and not report.archive_checked:
            unchecked = f"events 1..{report.archived_seq} and {report.rows_not_rechecked} rows"
            stdout.print(f"{unchecked} are archived, not re-checked: pass --archive DIR", highlight=False)
    else:
        stdout.print(
            f"[bold red]ledger {location} FAILED verification[/] ({len(report.problems)} problems)",
            highlight=False,
        )
        for problem in report.problems:
            where, detail = escape(problem.where), escape(problem.detail)
            stdout.print(f"  [red]✗[/] {problem.kind:15} {where}: {detail}", highlight=False)
    if not report.ok:
        sys.exit(1)


def _advice(call: CallRecord) -> str:
    target = f"{call.server}/{call.tool}"
    return (
        f"check in {call.server} whether {target} took effect (look for its receipt, or read the "
        f"record it would have changed); then: codemode ledger reconcile {call.call_id} "
        "--succeeded|--failed --evidence TEXT [--receipt R]"
    )


@ledger.command()
@config_option
@json_option
@click.argument("call_id", required=False, metavar="[CALL_ID]")
@click.option("--succeeded", "resolution", flag_value="succeeded", help="The call did take effect.")
@click.option("--failed", "resolution", flag_value="failed", help="The call did NOT take effect.")
@click.option("--evidence", metavar="TEXT", help="What you checked and what it showed (required with an ID).")
@click.option("--receipt", metavar="R", help="The external receipt id of the side effect, if any.")
@click.option(
    "--read-back",
    "read_back",
    metavar="SERVER/TOOL",
    help="Settle it by asking the server: call this read-only tool (with --args) and look for --expect.",
)
@click.option("--args", "read_args", metavar="JSON", default="{}", help="Arguments of the --read-back tool.")
@click.option(
    "--expect", metavar="TEXT", help="With --read-back: text whose presence proves the call took effect."
)
@click.option(
    "--failed-if-missing",
    is_flag=True,
    help="With --read-back: if --expect is absent, record the call as failed (default: leave it unknown).",
)
@handle_errors
def reconcile(
    config_path: Path | None,
    as_json: bool,
    call_id: str | None,
    resolution: str | None,
    evidence: str | None,
    receipt: str | None,
    read_back: str | None,
    read_args: str,
    expect: str | None,
    failed_if_missing: bool,
) -> None:
    """List calls whose outcome is unknown, or settle one.

    A call is unknown when its request was sent but no answer came (timeout, lost
    connection, the broker died). codemode never retries such a call by itself: it may have
    taken effect. Check the server, then record what you found:

    \b
    --succeeded  later calls with the same idempotency key replay it instead of running again
    --failed     the key is free again: the next call with it runs

    Or let codemode look: --read-back crm/list_writes --args '{"reference": "INV-7"}' --expect INV-7
    calls that tool (it must be approved and read-only) and settles the call as succeeded when the
    answer contains the expected text (and, with --failed-if-missing, as failed when it does not).
    """
    if read_back is not None:
        if call_id is None or not expect:
            fail("--read-back needs a CALL_ID and --expect TEXT", code=EXIT_USAGE)
        settled_by_read_back = _redacted(
            anyio.run(_read_back, config_path, call_id, read_back, read_args, expect, failed_if_missing)
        )
        if as_json:
            print_json({"call": _dump(settled_by_read_back)})
        else:
            stdout.print(
                f"{escape(settled_by_read_back.call_id)} is {_styled(settled_by_read_back.state)}",
                highlight=False,
            )
        return
    with _open(config_path) as store:
        if call_id is None:
            if resolution or evidence or receipt:
                fail("--succeeded/--failed/--evidence/--receipt need a CALL_ID", code=EXIT_USAGE)
            unknown = [_redacted(c) for c in store.unknown_calls()]
            undone = [_redacted(c) for c in failed_compensations(store)]
            if as_json:
                print_json(
                    {
                        "ledger": store.location,
                        "unknown": [{**_dump(c), "advice": _advice(c)} for c in unknown],
                        "compensation_failed": [_dump(c) for c in undone],
                    }
                )
                return
            for call in undone:
                why = f"compensation failed: {call.reason or '-'}; its effect remains, not retried"
                stdout.print(f"[bold red]{escape(call.compensates or '')}[/]  {escape(why)}", highlight=False)
            if not unknown:
                stdout.print("no calls with an unknown outcome", highlight=False)
                return
            for call in unknown:
                head = f"{call.server}/{call.tool}  sent {_when(call.sent_at)}"
                head += f"  by {call.principal}@{call.tenant}"
                stdout.print(f"[bold magenta]{escape(call.call_id)}[/]  {escape(head)}", highlight=False)
                if call.idempotency_key:
                    stdout.print(f"    key: {escape(call.idempotency_key)}", highlight=False)
                if call.arguments is not None:
                    stdout.print(f"    arguments: {escape(str(call.arguments))}", highlight=False)
                stdout.print(f"    why: {escape(call.reason or '-')}", highlight=False)
                stdout.print(f"    [dim]to do:[/] {escape(_advice(call))}", highlight=False)
            return
        if resolution is None:
            fail("say what happened: --succeeded or --failed", code=EXIT_USAGE)
        if not evidence:
            fail("--evidence TEXT is required: what you checked and what it showed", code=EXIT_USAGE)
        settled = store.resolve(
            call_id,
            "succeeded" if resolution == "succeeded" else "failed",
            evidence,
            receipt=receipt,
            resolved_by="cli",
        )
    settled = _redacted(settled)
    if as_json:
        print_json({"call": _dump(settled)})
    else:
        stdout.print(f"{escape(settled.call_id)} is now {_styled(settled.state)}", highlight=False)


async def _read_back(
    config_path: Path | None, call_id: str, tool: str, read_args: str, expect: str, failed_if_missing: bool
) -> CallRecord:
    """Reconcile from the server's own view, through an approved read-only tool."""
    from codemode.broker import tool_risk
    from codemode.catalog import load_lock, parse_selector
    from codemode.ledger import ReadBackVerdict, resolve_with_read_back

    config = load(config_path)
    server, name = parse_selector(tool)
    if server is None or name is None:
        fail("--read-back takes SERVER/TOOL", code=EXIT_USAGE)
    try:
        arguments = json.loads(read_args)
    except json.JSONDecodeError as exc:
        fail(f"--args is not valid JSON: {exc.msg}", code=EXIT_USAGE)
    pinned = load_lock(config.lock_path).approved_pin(server, name)
    if pinned is None:
        fail(f"{tool} is not an approved tool", hint="approve it with 'codemode pin --approve'")
    entry = config.servers.get(server)
    risk = tool_risk(
        config.policy,
        server,
        name,
        pinned.definition.get("annotations"),
        trusted=bool(entry and entry.trusted),
        accepted=pinned.accepted_risk,
    )
    if risk != "low":
        fail(f"{tool} is not marked read-only: reconciling must not risk repeating a side effect")

    from codemode.calls import CallDenied, ToolError, ToolResult
    from codemode.engine import CodeMode

    # Only the read tool's server, and no warm sandboxes: the call is made by codemode itself,
    # through the broker (gated, recorded in the ledger as a run of its own).
    narrowed = config.model_copy(
        update={
            "servers": {server: config.servers[server]},
            "sandbox": config.sandbox.model_copy(update={"pool_size": 0}),
        }
    )
    refusal: list[str] = []

    async def look(record: CallRecord) -> ReadBackVerdict | None:
        async with CodeMode(narrowed, ledger=ledger) as engine:
            answer = await engine.call_tool(server, name, arguments, purpose=f"read-back of {record.call_id}")
        if not isinstance(answer, ToolResult):
            if isinstance(answer, CallDenied):
                refusal.append(f"the {answer.gate} gate refused the read-back call {tool}: {answer.reason}")
            elif isinstance(answer, CallPlanned):  # a read-back is never a dry run; said plainly if it were
                refusal.append(f"the read-back call {tool} was planned, not sent")
            else:
                why = answer.message if isinstance(answer, ToolError) else answer.reason
                refusal.append(f"the read-back call {tool} failed: {why}")
            return None
        text = json.dumps(answer.structured) if answer.structured is not None else ""
        text += " ".join(str(block.model_dump().get("text", "")) for block in answer.content)
        seen = f"{tool}({read_args}) at read-back"
        if expect in text:
            return ReadBackVerdict(
                resolution="succeeded", evidence=f"{seen} shows {expect!r}", receipt=expect
            )
        if failed_if_missing:
            return ReadBackVerdict(resolution="failed", evidence=f"{seen} does not show {expect!r}")
        stderr.print(f"{tool} does not show {expect!r}; {record.call_id} stays unknown", highlight=False)
        return None

    with open_ledger(config.ledger_location()) as ledger:
        settled = await resolve_with_read_back(ledger, call_id, look, resolved_by=f"read-back:{tool}")
    if refusal:
        fail(refusal[0])
    return settled


ledger.add_command(compensate)  # in its own module: `ledger compensate` and what it shows
ledger.add_command(archive)  # retention (issue 42): its own module
