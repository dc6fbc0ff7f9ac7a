"""``codemode batch``: one program over every item of a JSON Lines or CSV file."""

from __future__ import annotations

import contextlib
import shlex
import sys
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import anyio
import click
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from codemode.cli._batch_plan import plan_batch, print_batch_plan
from codemode.cli._common import (
    EXIT_USAGE,
    config_option,
    fail,
    handle_errors,
    json_option,
    load,
    print_json,
    show_warnings,
    stderr,
    stdout,
)
from codemode.cli._signals import run_until_signalled

if TYPE_CHECKING:
    from codemode.batch import FailureGroup, Workers
    from codemode.config import Config

STATUSES = ("done", "failed", "unknown", "unverified", "pending", "running")
MAX_GROUPS_SHOWN = 10
"""Reasons of failure listed after a run, the largest groups first (--json lists them all)."""


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
    "--reverify",
    is_flag=True,
    help="Also check unverified items again with --verify, on their stored results: their program "
    "(and so their writes) does not run again.",
)
@click.option(
    "--verify",
    "verify_program",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="A read-only program that gets INPUT and RESULT and must return True for the item to count as done.",
)
@click.option(
    "--max-attempts",
    type=click.IntRange(1, 100),
    help="Attempts per failed item [default: 3]. A failure that would repeat (a policy denial, "
    "the program's own error before any call) gets no more in the same run. Run again, failed "
    "items that have had fewer attempts run again: raise it to retry items that used theirs up.",
)
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write one JSON line per settled item here, as each settles (it holds every settled "
    "item after a Ctrl-C or a kill too).",
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
@click.option(
    "--compensate",
    is_flag=True,
    help="Undo the side effects of each item that ends failed or unverified, with the calls of "
    "[compensation]; the summary gives the compensation success rate.",
)
@click.option(
    "--plan",
    "plan_only",
    is_flag=True,
    help="Review the job's side effects first: dry-run a sample of the items (only reads are sent) and "
    "show the calls per tool with the shape of their arguments. Nothing else runs.",
)
@click.option(
    "--sample",
    type=click.IntRange(0, 1000),
    default=5,
    show_default=True,
    help="With --plan: how many items to dry-run, from the first (0: all).",
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
    reverify: bool,
    verify_program: Path | None,
    max_attempts: int | None,
    out: Path | None,
    engine: str | None,
    ray_address: str | None,
    compensate: bool,
    plan_only: bool,
    sample: int,
    strict: bool,
    principal: str | None,
    tenant: str | None,
) -> None:
    """Run PROGRAM once per item of --inputs; the program sees its item as INPUT (a dict).

    Each item runs in its own sandbox with the same broker, gates and ledger as 'codemode run'.
    Side-effecting calls get idempotency keys derived from the job, the item and the call, so
    a retried, resumed or re-run item never repeats a completed call. A call whose outcome is
    unknown is never re-sent: its item is 'unknown' until 'codemode ledger reconcile' settles it.
    A failed item is retried up to --max-attempts, unless another attempt would fail the same
    way (a policy denial, the program's own error before any call); the summary counts failed
    items by reason. --out is written as items settle: after Ctrl-C or a kill it holds every
    settled item, and the resume lists none twice.

    \b
    Examples:
      codemode batch enrich.py --inputs docs.jsonl --key doc_id --out results.jsonl
      codemode batch enrich.py --inputs docs.jsonl --key doc_id --job-id nightly --resume
      codemode batch enrich.py --inputs docs.jsonl --key doc_id --engine ray --ray-address 10.0.0.5:6379
      codemode batch enrich.py --inputs docs.jsonl --plan --sample 20     # its writes, before any runs
    \b
    Exit status: 0 when every item is done; 1 when any is failed, unknown or unverified; 2 for
    usage errors. --json prints one summary document on stdout.
    """
    from codemode.batch import BatchError, BatchOptions, UsageTally, is_bad, run_batch
    from codemode.broker import RunLimits

    if resume and not job_id:
        fail("--resume needs --job-id (the job to resume)", code=EXIT_USAGE)
    if reverify and verify_program is None:
        fail("--reverify checks items with the job's verify program: give it with --verify", code=EXIT_USAGE)
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
        reverify=reverify,
        out=out,
        compensate=compensate or config.policy.compensate == "on_failure",
    )
    code = program.read_text(encoding="utf-8")
    if plan_only:
        sampled = partial(
            plan_batch, config, code, inputs, key_field, sample, principal=principal, tenant=tenant
        )
        summary = run_until_signalled(sampled)
        print_batch_plan(summary, as_json)
        sys.exit(1 if summary["failed"] else 0)
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
            todo = await anyio.to_thread.run_sync(job.store.todo, job.job_id, options.runnable())
            idle: str | None = None
            if todo == 0:
                counts = await anyio.to_thread.run_sync(job.store.counts, job.job_id)
                failures = await anyio.to_thread.run_sync(_failures, job.store, job.job_id)
                idle = _why_nothing_runs(job.job_id, counts, failures, has_verify=verify_program is not None)
                stderr.print(idle, markup=False, highlight=False, soft_wrap=True)
            seen: Counter[str] = Counter()
            calls = 0
            usage = UsageTally()
            started = time.monotonic()
            with _progress(quiet) as bar:
                task = bar.add_task("items", total=todo, stats="")
                async for result in run.results():
                    seen[result.status] += 1
                    calls += result.calls
                    usage.add(result.usage, result.broker_cpu_s)
                    elapsed = max(time.monotonic() - started, 1e-9)
                    stats = " ".join(
                        f"{s} {seen[s]}" for s in ("done", "failed", "unknown", "unverified") if seen[s]
                    )
                    bar.update(task, advance=1, stats=f"{stats} · {calls / elapsed:.1f} calls/s")
            elapsed = time.monotonic() - started
            counts = await anyio.to_thread.run_sync(job.store.counts, job.job_id)
            failures = await anyio.to_thread.run_sync(_failures, job.store, job.job_id)
            undone = await anyio.to_thread.run_sync(_compensation, config, job.store, job.job_id)
        items = sum(counts.values())
        return {
            "job_id": job.job_id,
            "resumed": job.resumed,
            "items": items,
            "counts": {s: counts.get(s, 0) for s in STATUSES},
            "success_rate": round(counts.get("done", 0) / items, 4) if items else None,
            "compensation": undone,
            "ran_now": sum(seen.values()),
            "calls_now": calls,
            "seconds": round(elapsed, 3),
            "items_per_s": round(sum(seen.values()) / elapsed, 2) if elapsed > 0 else None,
            "usage_now": usage.to_json(),
            "failures": [group.to_json() for group in failures],
            "retry_left": any(
                g.status == "failed" and g.attempts[0] < options.max_attempts for g in failures
            ),
            "skipped": job.skipped,
            "skipped_lines": job.bad_lines,
            "nothing_to_run": idle,
            "out": str(out) if out else None,
        }

    show_warnings()  # a server that did not start is said before any item runs
    summary = run_until_signalled(main)
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


def _compensation(config: Config, store: Any, job_id: str) -> dict[str, Any]:
    """The job's compensation tally, from the ledger (see :func:`codemode.batch.compensation_tally`)."""
    from codemode.batch import compensation_tally
    from codemode.ledger import open_ledger

    with open_ledger(config.ledger_location(), create=False) as ledger:
        return compensation_tally(ledger, store.items(job_id)).to_json()


def _failures(store: Any, job_id: str) -> list[FailureGroup]:
    from codemode.batch import group_failures

    return group_failures(store.failures(job_id))


def _why_nothing_runs(
    job_id: str, counts: Mapping[str, int], failures: Sequence[FailureGroup], *, has_verify: bool
) -> str:
    """Why a run of the job runs no item, and what would make it run some."""
    total = sum(counts.values())
    if total == 0:
        return f"job {job_id} has no items, so nothing runs: its input held none"
    attempts = [group.attempts for group in failures if group.status == "failed"]
    least = min((low for low, _ in attempts), default=0)
    most = max((high for _, high in attempts), default=0)
    parts: list[str] = []
    for status in ("done", "failed", "unknown", "unverified"):
        if counts.get(status):
            parts.append(f"{counts[status]} {status}")
            if status == "failed" and attempts:
                span = f"{most}" if least == most else f"{least} to {most}"
                parts[-1] += f" after {span} attempt{'' if most == 1 else 's'}"
    ways: list[str] = []
    if attempts:
        ways.append(f"--max-attempts {most + 1} retries the failed items")
    if counts.get("unknown"):
        ways.append(
            "--retry-unknown runs the unknown items once 'codemode ledger reconcile' settled their calls"
        )
    if counts.get("unverified"):
        ways.append(
            "--reverify checks the unverified items again" + ("" if has_verify else " (with --verify)")
        )
    ways.append("another --job-id starts over and runs every item")
    return (
        f"nothing to run: all {total} items of job {job_id} are settled ({', '.join(parts)}); "
        + "; ".join(ways)
    )


def _print_summary(summary: dict[str, Any]) -> None:
    table = Table(title=f"job {summary['job_id']}" + (" (resumed)" if summary["resumed"] else ""))
    table.add_column("status")
    table.add_column("items", justify="right")
    styles = {"done": "green", "failed": "red", "unknown": "magenta", "unverified": "yellow"}
    for status, count in summary["counts"].items():
        if count:
            table.add_row(f"[{styles.get(status, 'dim')}]{status}[/]", str(count))
    stdout.print(table)
    _print_rates(summary)
    rate = summary["items_per_s"]
    stdout.print(
        f"{summary['ran_now']} items run now in {summary['seconds']:.1f} s"
        + (f" ({rate:.1f} items/s, {summary['calls_now']} calls)" if rate is not None else ""),
        highlight=False,
    )
    cost = _cost_line(summary["usage_now"])
    if cost:
        stdout.print(cost, highlight=False)
    shown = summary["failures"][:MAX_GROUPS_SHOWN]
    for group in shown:
        # The reasons quote what programs and servers said: printed as text, never as markup.
        stdout.print(f"{group['status']} {group['count']}: {group['reason']}", markup=False, highlight=False)
        for line in group["detail"].splitlines():
            stdout.print(f"  {line}", markup=False, highlight=False, style="dim")
    if len(summary["failures"]) > len(shown):
        rest = sum(group["count"] for group in summary["failures"][len(shown) :])
        stdout.print(f"… and {rest} more items for other reasons (see --out or --json)", highlight=False)
    if summary["retry_left"]:
        stdout.print(
            "failed items with attempts left run again when the job runs again: fix their cause, "
            "then run the same command"
        )
    if summary["counts"].get("unknown"):
        stdout.print(
            "[magenta]unknown items:[/] settle their calls with 'codemode ledger reconcile', "
            "then run the job again with --retry-unknown"
        )
    if summary["skipped"]:
        first = summary["skipped_lines"][0]
        more = summary["skipped"] - 1
        stdout.print(
            f"skipped {summary['skipped']} input line{'' if summary['skipped'] == 1 else 's'}: "
            f"line {first['line']}: {first['reason']}" + (f" (and {more} more)" if more else ""),
            markup=False,
            highlight=False,
        )
    if summary["out"]:
        stdout.print(f"results: {summary['out']}", highlight=False)


def _print_rates(summary: Mapping[str, Any]) -> None:
    """The success rate, and next to it how the items that did not succeed were undone."""
    if summary["success_rate"] is None:
        return
    line = f"success rate {summary['success_rate']:.1%} ({summary['counts']['done']} of {summary['items']})"
    undone = summary["compensation"]
    if undone["needed"]:
        line += (
            f" · compensation success rate {undone['rate']:.1%} "
            f"({undone['compensated']} of the {undone['needed']} items whose side effects needed undoing)"
        )
    stdout.print(line, highlight=False)
    if undone["failed"]:
        shown = ", ".join(undone["failed"][:MAX_GROUPS_SHOWN])
        more = len(undone["failed"]) - MAX_GROUPS_SHOWN
        stdout.print(
            f"compensation failed for {len(undone['failed'])} item(s): {shown}"
            + (f" (and {more} more)" if more > 0 else "")
            + "; their side effects remain: see 'codemode ledger reconcile'",
            markup=False,
            highlight=False,
        )


def _cost_line(usage: Mapping[str, Any]) -> str:
    """``sandbox CPU 3.21 s (p50 0.12 s, p95 0.40 s per item) · peak 41 MB (p95 40 MB)``: what the
    items run now cost, from what was measured (empty when nothing was)."""
    parts: list[str] = []
    cpu, peak, broker = usage["sandbox_cpu_s"], usage["sandbox_peak_mb"], usage["broker_cpu_s"]
    if cpu is not None:
        parts.append(
            f"sandbox CPU {cpu['total']:.2f} s (p50 {cpu['p50']:.2f} s, p95 {cpu['p95']:.2f} s per item)"
        )
    if peak is not None:
        parts.append(f"peak {peak['max']:.0f} MB (p50 {peak['p50']:.0f} MB, p95 {peak['p95']:.0f} MB)")
    if broker is not None:
        parts.append(f"broker CPU {broker['total']:.3f} s")
    caps = usage["caps_hit"]
    if caps:
        parts.append(
            "stopped by a cap: " + ", ".join(f"{cap.replace('_', '-')} {n}" for cap, n in caps.items())
        )
    return " · ".join(parts)
