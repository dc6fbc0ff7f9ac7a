"""``codemode approve --plan PLAN_ID``: review a dry run's plan - the program and every planned
call - and approve it as a whole, bound to the code's digest and to each planned call's tool,
argument digest and occurrence, until it expires (``--revoke`` withdraws it).

The plan comes from the ledger, where the dry run stored it (``codemode run --plan``); the
approval is an event in the same ledger, so every process sharing it sees it.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime, timedelta

import click

from codemode._text import escape_invisible
from codemode.cli._common import fail, print_json, stderr
from codemode.cli._plan_view import print_plan
from codemode.config import Config
from codemode.engine import Plan, record_plan_approval
from codemode.ledger import LedgerStateError, open_ledger


def _show(plan: Plan) -> None:
    """The program as it will run, then its planned calls (all of it on the terminal's stderr,
    except the table: the approver reads both before answering)."""
    stderr.print(f"[bold]plan {plan.plan_id}[/] of run {plan.run_id}: the program", highlight=False)
    stderr.print(escape_invisible(plan.code), markup=False, highlight=False, emoji=False)
    print_plan(plan, next_step=False)


def approve_plan(
    config: Config, plan_id: str, *, ttl: timedelta, note: str | None, yes: bool, revoke: bool, as_json: bool
) -> None:
    with open_ledger(config.ledger_location()) as ledger:
        record = ledger.get_plan(plan_id)
        if record is None:
            where = config.ledger_location()
            fail(f"no plan {plan_id} in {where}", hint="make one with 'codemode run --plan FILE'")
        if revoke:
            revoked = ledger.revoke_plan(plan_id)
            if as_json:
                at = revoked.revoked_at
                print_json({"plan_id": plan_id, "revoked_at": None if at is None else at.isoformat()})
            else:
                click.echo(f"revoked plan {plan_id}: no run uses it from now on")
            return
        plan = Plan.from_record(record)
        if not as_json:
            _show(plan)
        if not yes:
            if not sys.stdin.isatty():
                fail(
                    f"approving plan {plan_id} needs an answer and there is no terminal",
                    hint=f"review it, then run 'codemode approve --plan {plan_id} --yes'",
                )
            if not click.confirm(f"approve all {len(plan.calls)} planned calls of {plan_id}?", default=False):
                fail(f"plan {plan_id} was not approved")
        try:
            approved = record_plan_approval(
                ledger, plan, approver="cli", ttl=ttl, note=note, now=datetime.now(UTC)
            )
        except LedgerStateError as exc:
            fail(str(exc))
    until = approved.approval_expires_at
    assert until is not None
    if as_json:
        print_json(Plan.from_record(approved).as_json() | {"approval_expires_at": until.isoformat()})
    else:
        click.echo(
            f"approved plan {plan_id} ({len(plan.calls)} planned calls) for "
            f"{approved.principal}@{approved.tenant} until {until:%Y-%m-%d %H:%M:%S} UTC; run it with "
            f"'codemode run --with-plan {plan_id} FILE'"
        )
