"""``codemode ledger show ID --evidence``: each call's evidence chain, as tables or JSON."""

from __future__ import annotations

from typing import Any

from rich.markup import escape
from rich.table import Table

from codemode._redaction import redact_value
from codemode.cli._common import print_json, stdout
from codemode.ledger import CallEvidence, EvidenceLink, RunEvidence

# Gaps are written in capitals so that they stand out without colour too (pipes, CI logs).
_STATUS: dict[str, str] = {
    "ok": "[green]✓ ok[/]",
    "none": "[dim]- none[/]",
    "n/a": "[dim]- n/a[/]",
    "pending": "[cyan]… pending[/]",
    "missing": "[bold red]✗ MISSING[/]",
    "unverified": "[yellow]? UNVERIFIED[/]",
    "mismatch": "[bold red]✗ MISMATCH[/]",
}


def _when(moment: Any) -> str:
    return "-" if moment is None else moment.strftime("%Y-%m-%d %H:%M:%S")


def _link_json(link: EvidenceLink) -> dict[str, Any]:
    dumped = link.model_dump(mode="json", exclude={"name"})  # the name is the key it sits under
    return {**dumped, "gap": link.is_gap}


def _call_json(call: CallEvidence) -> dict[str, Any]:
    return {
        "call_id": call.call_id,
        "server": call.server,
        "tool": call.tool,
        "state": call.state,
        "complete": call.complete,
        "gaps": list(call.gaps),
        "links": {link.name: _link_json(link) for link in call.links},
        "events": [e.model_dump(mode="json") for e in call.events],
    }


def evidence_json(location: str, evidence: RunEvidence) -> dict[str, Any]:
    """The whole chain: ``links`` keyed by link name, in chain order; ``gaps`` names the broken ones."""
    run = evidence.run
    run_json = None
    if run is not None:
        run_json = run.model_copy(update={"summary": redact_value(run.summary)}).model_dump(mode="json")
    return {
        "ledger": location,
        "run": run_json,
        "complete": evidence.complete,
        "calls": [_call_json(call) for call in evidence.calls],
    }


def _call_table(call: CallEvidence) -> Table:
    table = Table(show_edge=False, header_style="bold", pad_edge=False)
    table.add_column("link", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("evidence", overflow="fold")
    for link in call.links:
        # The dash keeps value and note apart where colour is lost.
        parts = [escape(link.value)] if link.value else []
        if link.note:
            parts.append(f"[dim]{escape(link.note)}[/]")
        table.add_row(link.label, _STATUS[link.status], " — ".join(parts) or "[dim]-[/]")
    return table


def _servers_without_receipts(evidence: RunEvidence) -> list[str]:
    return sorted(
        {
            call.server
            for call in evidence.calls
            for link in call.links
            if link.name == "receipt" and link.record.get("server_gives_receipts") is False
        }
    )


def print_evidence(evidence: RunEvidence) -> None:
    """The run's header, then one table per call: every link, its status and what backs it."""
    run = evidence.run
    if run is not None:
        head = (
            f"[bold]run {escape(run.run_id)}[/]  {escape(run.status)}  "
            f"{escape(run.principal)}@{escape(run.tenant)}  trace {escape(run.trace_id)}  "
            f"started {_when(run.started_at)}  finished {_when(run.finished_at)}"
        )
        stdout.print(head, highlight=False)
    if not evidence.calls:
        stdout.print("no calls", highlight=False)
        return
    with_gaps = sum(1 for call in evidence.calls if not call.complete)
    verdict = "[green]every chain complete[/]" if with_gaps == 0 else f"[bold red]{with_gaps} with gaps[/]"
    stdout.print(f"{len(evidence.calls)} calls; {verdict}", highlight=False)
    silent = _servers_without_receipts(evidence)
    if silent:
        # Said once, so that a reader of a third-party server's writes knows why their receipt
        # links are n/a and not gaps.
        names = escape(", ".join(silent))
        stdout.print(f"[dim]no receipt expected from {names}: no call to it in this ledger recorded one[/]")
    for call in evidence.calls:
        where = f"{call.server}/{call.tool}  {call.state}"
        stdout.print(f"\n[bold]{escape(call.call_id)}[/]  {escape(where)}", highlight=False)
        stdout.print(_call_table(call))
        if call.gaps:
            labels = ", ".join(link.label for link in call.links if link.is_gap)
            stdout.print(f"[bold red]gaps:[/] {labels}", highlight=False)
        else:
            stdout.print("[green]chain complete[/]", highlight=False)


def show_evidence(location: str, evidence: RunEvidence, as_json: bool) -> None:
    if as_json:
        print_json(evidence_json(location, evidence))
    else:
        print_evidence(evidence)
