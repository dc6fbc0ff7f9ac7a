"""``codemode batch``: one program over every item of a JSON Lines or CSV file."""

from __future__ import annotations

import contextlib
import json
import shlex
import sys
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import anyio
import click
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from codemode._atomic import replace_file
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

if TYPE_CHECKING:
    from codemode.batch import Workers

STATUSES = ("done", "failed", "unknown", "unverified", "pending", "running")


@click.command()
@config_option
@json_option
@click.argument("program", type=click.Path(exists=True, dir_okay=False, path_type=Path), metavar="PROGRAM")
@click.option(
    "--inputs",
    required=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Items: a .jsonl file (one JSON object per line) or a .csv file with a header row.",
)
@click.option(
    "--key", "key_field", metavar="FIELD", help="The field that identifies an item [default: line number]."
)
@click.option(
    "--concurrency", type=click.IntRange(1, 256), help="Items at once [default: [batch] concurrency, 4]."
)
@click.option(
    "--job-id",
    metavar="ID",
    help="Name the job; running it again with the same id resumes it "
    "[default: named after the program, the inputs, --key and who runs it].",
)
@click.option("--resume", is_flag=True, help="Resume --job-id (fails if there is no such job).")
@click.option("--retry-unknown", is_flag=True, help="Also run items left unknown (after 'ledger reconcile').")
@click.option(
    "--verify",
    "verify_program",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="A read-only program that gets INPUT and RESULT and must return True for the item to count as done.",
)
@click.option(
    "--max-attempts",
    type=click.IntRange(1, 100),
    help="Attempts per failed item [default: 3]. With --resume, failed items that have had fewer "
    "attempts run again: raise it to retry items that used theirs up.",
)
@click.option(
    "--out", type=click.Path(dir_okay=False, path_type=Path), help="Write one JSON line per item here."
)
@click.option(
    "--engine",
    type=click.Choice(["local", "ray"]),
    help="Run items on this machine, or on actors of a Ray cluster [default: [batch] engine, local].",
)
@click.option(
    "--ray-address",
    metavar="auto|HOST:PORT",
    help="The Ray cluster for --engine ray [default: [batch] ray_address, else auto].",
)
@click.option("--strict", is_flag=True, help="Fail before running anything if an input line is malformed.")
@click.option("--principal", help="Run as this principal [default: policy.default_principal].")
@click.option("--tenant", help="Run in this tenant [default: the principal's default tenant].")
@handle_errors
def batch(
    config_path: Path | None,
    as_json: bool,
    program: Path,
    inputs: Path,
    key_field: str | None,
    concurrency: int | None,
    job_id: str | None,
    resume: bool,
    retry_unknown: bool,
    verify_program: Path | None,
    max_attempts: int | None,
    out: Path | None,
    engine: str | None,
    ray_address: str | None,
    strict: bool,
    principal: str | None,
    tenant: str | None,
) -> None:
    """Run PROGRAM once per item of --inputs; the program sees its item as INPUT (a dict).

    Each item runs in its own sandbox with the same broker, gates and ledger as 'codemode run'.
    Side-effecting calls get idempotency keys derived from the job, the item and the call, so
    a retried, resumed or re-run item never repeats a completed call. A call whose outcome is
    unknown is never re-sent: its item is 'unknown' until 'codemode ledger reconcile' settles it.

    \b
    Examples:
      codemode batch enrich.py --inputs docs.jsonl --key doc_id --out results.jsonl
      codemode batch enrich.py --inputs docs.jsonl --key doc_id --job-id nightly --resume
      codemode batch enrich.py --inputs docs.jsonl --key doc_id --engine ray --ray-address 10.0.0.5:6379
    \b
    Exit status: 0 when every item is done; 1 when any is failed, unknown or unverified; 2 for
    usage errors. --json prints one summary document on stdout.
    """
    from codemode.batch import BatchError, BatchOptions, is_bad, run_batch
    from codemode.broker import RunLimits

    if resume and not job_id:
        fail("--resume needs --job-id (the job to resume)", code=EXIT_USAGE)
    config = load(config_path)
    settings = config.batch
    if settings.wall_time_s is not None and settings.wall_time_s > config.sandbox.wall_time_s:
        fail(
            f"[batch] wall_time_s is above [sandbox] wall_time_s ({config.sandbox.wall_time_s:g})",
            code=EXIT_USAGE,
        )
    options = BatchOptions(
        job_id=job_id,
        key=key_field,
        concurrency=concurrency or settings.concurrency,
        max_attempts=max_attempts or settings.max_attempts,
        resume=resume,
        retry_unknown=retry_unknown,
        strict=strict,
        verify=verify_program.read_text(encoding="utf-8") if verify_program else None,
        wall_time_s=settings.wall_time_s,
        limits=RunLimits(calls=settings.calls_per_item, money=settings.money_per_item),
        principal=principal,
        tenant=tenant,
    )
    code = program.read_text(encoding="utf-8")
    quiet = as_json or not sys.stderr.isatty()
    workers = cast("Workers | None", engine)  # one of click.Choice(["local", "ray"]), or unset

    async def main() -> dict[str, Any]:
        async with contextlib.AsyncExitStack() as stack:
            try:
                run = await stack.enter_async_context(
                    run_batch(config, code, inputs, options, workers=workers, ray_address=ray_address)
                )
            except (BatchError, ValueError) as exc:
                fail(str(exc), code=EXIT_USAGE)
            job = run.job
            for bad in job.bad_lines[:20]:
                reason = escape(str(bad["reason"]))  # it may quote the input (a CSV header's names)
                stderr.print(f"[yellow]skipped input line {bad['line']}:[/] {reason}", highlight=False)
            # Before any item runs, on stderr (--json keeps stdout one document): a run killed from
            # here on is resumed by this command, never started over under another id.
            again = _resume_command(
                program, inputs, key_field, verify_program, config_path, principal, tenant, job.job_id
            )
            stderr.print(
                f"job {job.job_id} ({'resumed' if job.resumed else 'new'}); to resume it: {again}",
                markup=False,
                highlight=False,
                soft_wrap=True,
            )
            counts_before = await anyio.to_thread.run_sync(job.store.counts, job.job_id)
            todo = sum(counts_before.get(s, 0) for s in ("pending", "running", "failed"))
            if retry_unknown:
                todo += counts_before.get("unknown", 0)
            if job.resumed and todo == 0:
                stderr.print(
                    f"job {job.job_id} has no item left to run, so nothing runs; to run the items again "
                    "as a new job, give it another --job-id",
                    markup=False,
                    highlight=False,
                )
            seen: Counter[str] = Counter()
            calls = 0
            started = time.monotonic()
            with _progress(quiet) as bar:
                task = bar.add_task("items", total=todo, stats="")
                async for result in run.results():
                    seen[result.status] += 1
                    calls += result.calls
                    elapsed = max(time.monotonic() - started, 1e-9)
                    stats = " ".join(
                        f"{s} {seen[s]}" for s in ("done", "failed", "unknown", "unverified") if seen[s]
                    )
                    bar.update(task, advance=1, stats=f"{stats} · {calls / elapsed:.1f} calls/s")
            elapsed = time.monotonic() - started
            counts = await anyio.to_thread.run_sync(job.store.counts, job.job_id)
            if out is not None:
                await anyio.to_thread.run_sync(_write_out, job.store, job.job_id, out)
        return {
            "job_id": job.job_id,
            "resumed": job.resumed,
            "items": sum(counts.values()),
            "counts": {s: counts.get(s, 0) for s in STATUSES},
            "ran_now": sum(seen.values()),
            "calls_now": calls,
            "seconds": round(elapsed, 3),
            "items_per_s": round(sum(seen.values()) / elapsed, 2) if elapsed > 0 else None,
            "skipped_lines": job.bad_lines,
            "out": str(out) if out else None,
        }

    summary = anyio.run(main)
    if as_json:
        print_json(summary)
    else:
        _print_summary(summary)
    sys.exit(1 if any(is_bad(s) and n for s, n in summary["counts"].items()) else 0)


def _progress(quiet: bool) -> Progress:
    return Progress(
        TextColumn("[bold]batch[/]"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        TextColumn("{task.fields[stats]}"),
        console=stderr,
        disable=quiet,
        transient=False,
    )


def _resume_command(
    program: Path,
    inputs: Path,
    key_field: str | None,
    verify: Path | None,
    config_path: Path | None,
    principal: str | None,
    tenant: str | None,
    job_id: str,
) -> str:
    """The command that resumes the job: what names it (program, inputs, key, verify, who)."""
    args = ["codemode", "batch", str(program), "--inputs", str(inputs)]
    for flag, value in (
        ("--key", key_field),
        ("--verify", verify),
        ("--config", config_path),
        ("--principal", principal),
        ("--tenant", tenant),
    ):
        if value is not None:
            args += [flag, str(value)]
    return shlex.join([*args, "--job-id", job_id, "--resume"])


def _write_out(store: Any, job_id: str, out: Path) -> None:
    """Write the results whole or not at all: a crash while writing leaves the previous file.

    A link, a pipe or a device (``/dev/stdout``) is written through, as named: replacing it
    would put a plain file in its place."""
    if out.is_symlink() or (out.exists() and not out.is_file()):
        with out.open("w", encoding="utf-8") as handle:
            _write_items(store, job_id, handle)
        return
    replace_file(out, lambda handle: _write_items(store, job_id, handle), keep_mode=True)


def _write_items(store: Any, job_id: str, handle: Any) -> None:
    from codemode.batch import ItemResult

    for item in store.items(job_id):
        error = item.error if item.status != "done" else None
        line = ItemResult(
            item.key,
            item.line,
            item.status,
            item.attempts,
            item.run_id,
            item.result,
            error,
            item.calls,
            item.duration_ms,
        )
        handle.write(json.dumps(line.to_json(), ensure_ascii=False, default=str) + "\n")


def _print_summary(summary: dict[str, Any]) -> None:
    table = Table(title=f"job {summary['job_id']}" + (" (resumed)" if summary["resumed"] else ""))
    table.add_column("status")
    table.add_column("items", justify="right")
    styles = {"done": "green", "failed": "red", "unknown": "magenta", "unverified": "yellow"}
    for status, count in summary["counts"].items():
        if count:
            table.add_row(f"[{styles.get(status, 'dim')}]{status}[/]", str(count))
    stdout.print(table)
    rate = summary["items_per_s"]
    stdout.print(
        f"{summary['ran_now']} items run now in {summary['seconds']:.1f} s"
        + (f" ({rate:.1f} items/s, {summary['calls_now']} calls)" if rate is not None else ""),
        highlight=False,
    )
    if summary["counts"].get("unknown"):
        stdout.print(
            "[magenta]unknown items:[/] settle their calls with 'codemode ledger reconcile', "
            "then run the job again with --retry-unknown"
        )
    if summary["out"]:
        stdout.print(f"results: {summary['out']}", highlight=False)
