"""``codemode ledger archive``: move old events of the ledger to archive segment files."""

from __future__ import annotations

import dataclasses
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import click
from rich.markup import escape

from codemode.cli._common import (
    EXIT_USAGE,
    config_option,
    fail,
    handle_errors,
    json_option,
    load,
    print_json,
    stdout,
)
from codemode.config import Config
from codemode.ledger import archive_ledger, open_ledger


def _parse_date(value: str) -> datetime:
    """``2026-01-31`` (midnight UTC) or an ISO 8601 time (UTC when it names no zone)."""
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise click.BadParameter(
            f"{value!r} is not a date: write YYYY-MM-DD or an ISO 8601 time (2026-01-31T12:00:00Z)"
        ) from None
    if len(value) == 10:
        moment = datetime.combine(date.fromisoformat(value), datetime.min.time())
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment


def archive_dir(config: Config, given: Path | None) -> Path:
    """``--to``, or ``[ledger.retention] archive_dir`` beside the config file."""
    return given if given is not None else config.base_dir / config.ledger.retention.archive_dir


@click.command()
@config_option
@json_option
@click.option(
    "--before",
    metavar="DATE",
    help="Archive the events before this date (YYYY-MM-DD, UTC midnight) or time (ISO 8601). "
    "Default: [ledger.retention] archive_after_days ago.",
)
@click.option(
    "--to",
    "directory",
    type=click.Path(file_okay=False, path_type=Path),
    help="The archive directory. Default: [ledger.retention] archive_dir beside the config file.",
)
@click.option("--dry-run", is_flag=True, help="Say what would be archived; write and delete nothing.")
@handle_errors
def archive(
    config_path: Path | None, as_json: bool, before: str | None, directory: Path | None, dry_run: bool
) -> None:
    """Move the oldest events of the ledger to a segment file in the archive directory.

    Verifies the ledger first and refuses if that fails. Then writes the events before DATE (a
    whole prefix of the hash chain) to events-FIRST-LAST.jsonl with a manifest (first and last
    event, last hash, SHA-256 of the file), flushes both to disk, and only then deletes those
    events from the database, which records where its log now starts. Runs, calls and the other
    tables keep every row: 'ledger list' and 'ledger show' work as before (a call's history shows
    only the events still in the database).

    It stops early before the first event of open work (a running run, a call not settled, an
    unused approval, a plan or skill awaiting approval), and always keeps the newest event.
    Interrupted, it is run again: it finishes the segment it had written, and archives nothing twice.

    \b
    codemode ledger archive --before 2026-01-01 --dry-run
    codemode ledger archive       [ledger.retention] archive_after_days ago: run it daily from a timer
    codemode ledger verify --archive ledger-archive     check the archive and the database as one chain
    """
    config = load(config_path)
    now = datetime.now(UTC)
    if before is not None:
        cutoff = _parse_date(before)
    elif config.ledger.retention.archive_after_days is not None:
        cutoff = now - timedelta(days=config.ledger.retention.archive_after_days)
    else:
        fail(
            "say which events to archive: --before DATE",
            hint="or set archive_after_days in [ledger.retention] of codemode.toml",
            code=EXIT_USAGE,
        )
    target = archive_dir(config, directory)
    with open_ledger(config.ledger_location(), create=False) as store:
        result = archive_ledger(store, before=cutoff, directory=target, now=now, dry_run=dry_run)
        location = store.location
    if as_json:
        print_json({"ledger": location, **dataclasses.asdict(result)})
        return
    if result.resumed:
        stdout.print(f"finished an interrupted archive: {escape(result.resumed)}", highlight=False)
    if not result.events:
        stdout.print(f"nothing to archive before {result.before}: {escape(result.stopped)}", highlight=False)
        return
    verb = "would archive" if dry_run else "archived"
    where = "" if result.segment is None else f" to {escape(str(target / result.segment))}"
    stdout.print(
        f"{verb} events {result.first_seq}..{result.last_seq} ({result.events}){where}; "
        f"stopped: {escape(result.stopped)}",
        highlight=False,
    )
    if not dry_run:
        stdout.print(
            f"check it with: codemode ledger verify --archive {escape(str(target))}", highlight=False
        )
