"""``codemode approve``: pre-issue a single-use approval for one call with exactly these arguments.

A refused call's message gives the line to paste (``broker/gates/_ways_out.py``); arguments too
long for a command line, or holding a secret it must not show, come from a file instead.
"""

from __future__ import annotations

import json
import re
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import click

from codemode.broker import consent_digest, tool_risk
from codemode.catalog import load_lock, parse_selector
from codemode.cli._approve_plan import approve_plan
from codemode.cli._common import EXIT_USAGE, config_option, fail, handle_errors, json_option, load, print_json
from codemode.ledger import ApprovalRecord, open_ledger

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")


def _parse_ttl(text: str) -> timedelta:
    match = _DURATION.match(text.strip())
    if not match:
        raise click.BadParameter("use a number and a unit: 30s, 10m, 2h, 1d", param_hint="--ttl")
    value, unit = float(match.group(1)), match.group(2)
    return timedelta(seconds=value * {"s": 1, "m": 60, "h": 3600, "d": 86_400}[unit])


def _arguments_text(arguments: str | None, args_file: Path | None) -> tuple[str, str]:
    """The arguments' JSON text and where it came from (for the error message)."""
    if (arguments is None) == (args_file is None):
        fail(
            "give the call's arguments with --args JSON or --args-file FILE (one of the two)",
            hint='codemode approve crm/add_note --args \'{"customer_id": "CUST-0001"}\'',
            code=EXIT_USAGE,
        )
    if arguments is not None:
        return arguments, "--args"
    assert args_file is not None
    if str(args_file) == "-":
        return sys.stdin.read(), "the arguments on stdin"
    try:
        return args_file.read_text(encoding="utf-8"), str(args_file)
    except (OSError, UnicodeDecodeError) as exc:
        fail(f"cannot read --args-file {args_file}: {exc}", code=EXIT_USAGE)


@click.command()
@config_option
@json_option
@click.argument("tool", metavar="SERVER/TOOL", required=False)
@click.option("--args", "arguments", default=None, help="The exact arguments, as a JSON object.")
@click.option(
    "--args-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Read the arguments (a JSON object) from this file ('-': stdin) instead of --args.",
)
@click.option("--principal", help="Who may use it [default: policy.default_principal].")
@click.option("--tenant", help="In which tenant [default: policy.default_tenant].")
@click.option(
    "--ttl", default="10m", show_default=True, help="How long the approval stays valid (30s, 10m, 2h)."
)
@click.option("--note", default=None, help="Why it was approved (kept in the ledger).")
@click.option("--plan", "plan_id", default=None, help="Approve a dry run's plan (run --plan) as a whole.")
@click.option("--yes", is_flag=True, help="With --plan: approve without asking (after reviewing it).")
@click.option("--revoke", is_flag=True, help="With --plan: revoke the plan; no run uses it from then on.")
@handle_errors
def approve(
    config_path: Path | None,
    as_json: bool,
    tool: str | None,
    arguments: str | None,
    args_file: Path | None,
    principal: str | None,
    tenant: str | None,
    ttl: str,
    note: str | None,
    plan_id: str | None,
    yes: bool,
    revoke: bool,
) -> None:
    """Pre-issue a single-use approval for one call with exactly these arguments.

    The approval is bound to principal, tenant, tool and the digest of the canonical arguments,
    expires after --ttl, and is consumed by the first call that matches it. A call with other
    arguments, after expiry or a second time is not covered. A call refused for want of an
    approver prints the line to paste.

    \b
    codemode approve crm/record_payment \\
        --args '{"customer_id": "CUST-0001", "amount_cents": 500, "reference": "INV-7"}'
    codemode approve crm/record_payment --args-file payment.json

    With --plan PLAN_ID it shows a dry run's program and every call it planned, and approves them as
    a whole: bound to the code's digest and to each planned call's tool, argument digest and
    occurrence, for --ttl. 'codemode run --with-plan PLAN_ID FILE' then runs them without asking.
    """
    config = load(config_path)
    if plan_id is not None:
        if tool is not None or arguments is not None or args_file is not None:
            fail("--plan approves a whole plan: give no SERVER/TOOL or --args with it", code=EXIT_USAGE)
        approve_plan(config, plan_id, ttl=_parse_ttl(ttl), note=note, yes=yes, revoke=revoke, as_json=as_json)
        return
    if tool is None:
        fail("give the tool as SERVER/TOOL (or --plan PLAN_ID)", code=EXIT_USAGE)
    server, name = parse_selector(tool)
    if server is None or name is None:
        fail("give the tool as SERVER/TOOL", hint="codemode approve crm/record_payment --args '{...}'")
    text, source = _arguments_text(arguments, args_file)
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError as exc:
        fail(f"{source} is not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})")
    if not isinstance(parsed, dict):
        fail(f"{source} must hold a JSON object (the call's arguments by name)")
    pinned = load_lock(config.lock_path).approved_pin(server, name)
    if pinned is None:
        fail(
            f"{tool} is not an approved tool in {config.lock_path}",
            hint="run 'codemode sync' and 'codemode pin'",
        )
    trusted = bool((server_config := config.servers.get(server)) and server_config.trusted)
    risk = tool_risk(
        config.policy,
        server,
        name,
        pinned.definition.get("annotations"),
        trusted=trusted,
        accepted=pinned.accepted_risk,
    )
    now = datetime.now(UTC)
    record = ApprovalRecord.issue(
        tenant=tenant or config.policy.default_tenant,
        principal=principal or config.policy.default_principal,
        server=server,
        tool=name,
        args_digest=consent_digest(parsed, pinned.definition),  # pyright: ignore[reportUnknownArgumentType]
        risk=risk,
        approver="cli",
        expires_at=now + _parse_ttl(ttl),
        now=now,
        note=note,
    )
    ledger = open_ledger(config.ledger_location())
    try:
        ledger.record_approval(record)
    finally:
        ledger.close()
    if as_json:
        print_json(record.model_dump(mode="json"))
    else:
        click.echo(
            f"approved one call of {tool} for {record.principal}@{record.tenant} until "
            f"{record.expires_at:%Y-%m-%d %H:%M:%S} UTC ({record.approval_id})"
        )
