"""``codemode run``: a program in the sandbox against the configured servers."""

from __future__ import annotations

import contextlib
import json
import sys
import threading
from collections.abc import Generator
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import click
from rich.markup import escape

from codemode.broker import (
    Approver,
    Elicitor,
    RefusingSampler,
    TerminalApprover,
    TerminalElicitor,
    terminal_available,
)
from codemode.cli._common import (
    BACKEND_CHOICE,
    EXIT_USAGE,
    config_option,
    console,
    fail,
    handle_errors,
    json_option,
    load,
    print_json,
    show_warnings,
    stderr,
)
from codemode.cli._compensate_cmd import print_compensation
from codemode.cli._plan_view import plan_json, print_plan
from codemode.cli._signals import run_until_signalled
from codemode.config import BackendChoice, Config
from codemode.engine import CodeMode, Plan, RunResult, section_boundary, section_marker
from codemode.errors import QuotaExceededError

if TYPE_CHECKING:
    from rich.status import Status

NO_MODEL = (
    "codemode run has no model to answer a server's request for a completion (sampling); "
    "relay it with codemode serve (the MCP client's model) or the Python API's sampler"
)


class _Spinner:
    """``codemode run``'s spinner on stderr, which stops while a question is asked at the terminal.

    The spinner redraws its line many times a second, and the terminal approver and elicitor write
    their questions to the same screen (``/dev/tty``): without the pause, the redraw erases the
    question line ("⠴ running…yes"). Questions are asked from worker threads, possibly two at once
    (an approval and a server's request for input), so pauses are counted under a lock, and a
    pause that ends after its phase has ended starts nothing.
    """

    def __init__(self, show: bool) -> None:
        self.show = show
        self._lock = threading.Lock()
        self._status: Status | None = None
        self._pauses = 0

    @contextlib.contextmanager
    def showing(self, message: str) -> Generator[None]:
        """The spinner with ``message`` while the block runs (nothing when not shown)."""
        if not self.show:
            yield
            return
        status = console(True).status(message)
        with self._lock:
            self._status = status
            if not self._pauses:
                status.start()
        try:
            yield
        finally:
            with self._lock:
                self._status = None
                status.stop()

    @contextlib.contextmanager
    def paused(self) -> Generator[None]:
        """No spinner while the block runs (a question is on the screen)."""
        with self._lock:
            self._pauses += 1
            if self._pauses == 1 and self._status is not None:
                self._status.stop()
        try:
            yield
        finally:
            with self._lock:
                self._pauses -= 1
                if not self._pauses and self._status is not None:
                    self._status.start()


def one_sandbox(config: Config, memory_mb: int | None = None) -> Config:
    """A one-shot command runs one program: it starts one sandbox, not the warm pool."""
    update: dict[str, Any] = {"pool_size": 0}
    if memory_mb is not None:
        update["memory_mb"] = memory_mb
    sandbox = config.sandbox.model_copy(update=update)
    return config.model_copy(update={"sandbox": sandbox}).with_origin(config.source, config.base_dir)


def _checked_limits(config: Config, wall_time: float | None, memory: int | None) -> None:
    """``--wall-time`` and ``--memory`` may lower the configured limits, never raise them."""
    if wall_time is not None and wall_time > config.sandbox.wall_time_s:
        fail(
            f"--wall-time {wall_time:g} is above the configured maximum ([sandbox] wall_time_s = "
            f"{config.sandbox.wall_time_s:g})",
            hint="raise [sandbox] wall_time_s in codemode.toml to allow longer runs",
            code=EXIT_USAGE,
        )
    if memory is not None and memory > config.sandbox.memory_mb:
        fail(
            f"--memory {memory} is above the configured maximum "
            f"([sandbox] memory_mb = {config.sandbox.memory_mb})",
            hint="raise [sandbox] memory_mb in codemode.toml to allow more",
            code=EXIT_USAGE,
        )


def _quota_refusal(exc: BaseException) -> QuotaExceededError | None:
    """The quota refusal ``exc`` is (the engine's task groups may wrap it), or None."""
    if isinstance(exc, BaseExceptionGroup):
        matched, rest = cast("BaseExceptionGroup[BaseException]", exc).split(QuotaExceededError)
        if matched is None or rest is not None:
            return None
        return _quota_refusal(matched.exceptions[0])
    return exc if isinstance(exc, QuotaExceededError) else None


async def _run(
    code: str,
    config_path: Path | None,
    backend: BackendChoice | None,
    principal: str | None,
    tenant: str | None,
    approver: Approver | None,
    elicitor: Elicitor | None,
    spinner: _Spinner,
    wall_time: float | None = None,
    memory: int | None = None,
    plan: bool = False,
    with_plan: str | None = None,
    verify: str | None = None,
    compensate: bool | None = None,
) -> RunResult | Plan:
    config = load(config_path)
    _checked_limits(config, wall_time, memory)
    async with contextlib.AsyncExitStack() as stack:
        with spinner.showing("connecting to servers and starting a sandbox…"):
            engine = await stack.enter_async_context(
                CodeMode(
                    one_sandbox(config, memory),
                    approver=approver,
                    elicitor=elicitor,
                    sampler=RefusingSampler(NO_MODEL),
                    backend=backend,
                )
            )
        if spinner.show:
            stderr.print(f"[dim]sandbox backend: {engine.backend}[/]", highlight=False)
        with spinner.showing("planning (a dry run: only reads are sent)…" if plan else "running…"):
            if plan:
                return await engine.plan(code, principal=principal, tenant=tenant, wall_time_s=wall_time)
            return await engine.run(
                code,
                principal=principal,
                tenant=tenant,
                wall_time_s=wall_time,
                plan_id=with_plan,
                verify=verify,
                compensate=compensate,
            )
    raise AssertionError("unreachable")  # pyright cannot see that the block always returns


def _print_human(result: RunResult) -> None:
    """The value on stdout; on stderr the program's output and error, framed, then the summary.

    The framing is the model text's: a marker per section with a boundary none of the program's
    words hold, and an end marker, so a line the program prints cannot pass for codemode's.
    """
    if result.result_kind == "json":
        click.echo(json.dumps(result.result, indent=2, ensure_ascii=False))
    elif result.result is not None and result.result != "":
        click.echo(str(result.result))
    sys.stdout.flush()  # the value before the sections, for a reader of both streams at once
    sections: list[tuple[str, str]] = []
    if result.result_kind != "stdout" and result.stdout:
        sections.append(("stdout", result.stdout))
    if result.stderr:
        sections.append(("stderr", result.stderr))
    if result.error is not None:
        sections.append(("error", result.error_text()))
    if sections:
        boundary = section_boundary(*(content for _, content in sections))
        for name, content in sections:
            stderr.print(f"[dim]{section_marker(name, boundary)}[/]", highlight=False)
            error = result.error if name == "error" else None
            if error is not None:
                content = error.frames()  # Python's order: the frames, then the error, once
            if content:
                stderr.print(content, markup=False, emoji=False, highlight=False)
            if error is not None:
                stderr.print(f"[bold red]{escape(error.type)}[/]: {escape(error.message)}", highlight=False)
        stderr.print(f"[dim]{section_marker('end', boundary)}[/]", highlight=False)
    for flag in result.flags:
        stderr.print(f"[yellow]warning:[/] {escape(flag)}", highlight=False)
    if result.verify_error is not None:
        stderr.print(f"[yellow]unverified:[/] {escape(result.verify_error)}", highlight=False)
    print_compensation(result.compensation)
    outcome = "" if result.outcome is None else f"{result.outcome} · "
    stderr.print(
        f"[dim]{result.status} · {outcome}run {result.run_id} · {result.calls} calls · "
        f"{result.denials} denied · {escape(result.summary_line())} · {result.backend}[/]",
        highlight=False,
    )


@click.command()
@config_option
@json_option
@click.argument("program", type=click.File("r", encoding="utf-8"), metavar="FILE|-")
@click.option(
    "--backend",
    type=BACKEND_CHOICE,
    default=None,
    help="Sandbox backend [default: from [sandbox] backend, normally auto].",
)
@click.option("--principal", help="Run as this principal [default: policy.default_principal].")
@click.option("--tenant", help="Run in this tenant [default: the principal's default tenant].")
@click.option(
    "--no-input",
    is_flag=True,
    help="Never prompt: calls that need approval are denied, servers' requests for input refused.",
)
@click.option(
    "--wall-time",
    type=click.FloatRange(min=0.1),
    metavar="S",
    help="Stop the program after S seconds [default and maximum: [sandbox] wall_time_s].",
)
@click.option(
    "--memory",
    type=click.IntRange(min=16),
    metavar="MB",
    help="Memory limit of the sandbox [default and maximum: [sandbox] memory_mb].",
)
@click.option(
    "--plan",
    "plan",
    is_flag=True,
    help="Dry run: send only calls known to be read-only; plan the others and print the plan.",
)
@click.option(
    "--with-plan",
    "with_plan",
    metavar="PLAN_ID",
    default=None,
    help="Run under an approved plan: its planned calls need no other approval.",
)
@click.option(
    "--verify",
    "verify_program",
    type=click.File("r", encoding="utf-8"),
    metavar="CHECK.py",
    help="After the run, a read-only check program gets its value as RESULT and must return True; "
    "otherwise the run is unverified (exit status 1).",
)
@click.option(
    "--compensate/--no-compensate",
    default=None,
    help="Undo the completed side effects of a failed or unverified run with the calls of "
    "[compensation] [default: [policy] compensate].",
)
@handle_errors
def run(
    config_path: Path | None,
    as_json: bool,
    program: Any,
    backend: BackendChoice | None,
    principal: str | None,
    tenant: str | None,
    no_input: bool,
    wall_time: float | None,
    memory: int | None,
    plan: bool,
    with_plan: str | None,
    verify_program: Any,
    compensate: bool | None,
) -> None:
    """Run a Python program in the sandbox against the configured servers.

    The program imports the stubs it needs (from servers.crm import get_customer) and ends with
    an expression, or calls codemode.result(value); otherwise its printed output is the result.
    Calls that need approval, and servers that ask for input during a call (elicitation), are
    asked on this terminal (unless --no-input: then they are denied and declined). A server's
    request for a model completion (sampling) is refused: there is no model to ask here.

    With --plan the program runs for real, but only its calls known to be read-only (low risk) reach
    the servers; every other call is recorded in a plan (tool, arguments, risk, what consent would
    ask) and returns a placeholder the program can pass on but not inspect. The plan is stored in
    the ledger under its id. Once approved (codemode approve --plan PLAN_ID), --with-plan PLAN_ID
    runs the same program for real: each call matching a planned call passes consent without
    asking; any other call asks as usual (or is denied under --no-input), and the summary counts it.

    \b
    Exit status: 0 when the program succeeded (and its --verify check passed), 1 when it failed,
    is unverified or was refused by a quota of [policy.quotas] (it says which, and when to retry;
    --json: {"status": "refused", "error": "quota_exceeded", "quota", "limit", "retry_after_s", …}),
    2 for usage errors.
    --json prints {"status", "result", "stdout", "stderr", "error", "run_id", "calls", "duration_ms", …}.
    """
    if plan and with_plan is not None:
        fail("--plan makes a plan and --with-plan follows one: give one of them", code=EXIT_USAGE)
    code = program.read()
    verify = None if verify_program is None else verify_program.read()
    quiet = as_json or not sys.stderr.isatty()
    spinner = _Spinner(show=not quiet)
    asking = not no_input and terminal_available()
    approver: Approver | None = TerminalApprover(pause=spinner.paused) if asking else None
    elicitor: Elicitor | None = TerminalElicitor(pause=spinner.paused) if asking else None
    show_warnings()  # a server that did not start is said before the program runs
    try:
        result = run_until_signalled(
            _run,
            code,
            config_path,
            backend,
            principal,
            tenant,
            approver,
            elicitor,
            spinner,
            wall_time,
            memory,
            plan,
            with_plan,
            verify,
            compensate,
        )
    except (QuotaExceededError, BaseExceptionGroup) as exc:  # refused before it started: exit 1
        refused = _quota_refusal(exc)
        if refused is None:
            raise
        if as_json:
            print_json({"status": "refused", "error": "quota_exceeded", **refused.quota})
        else:
            stderr.print(f"[bold red]refused:[/] {escape(str(refused))}", markup=True, highlight=False)
        sys.exit(1)
    if isinstance(result, Plan):
        if as_json:
            print_json(plan_json(result))
        else:
            print_plan(result)
        sys.exit(0 if result.result is not None and result.result.status == "ok" else 1)
    if as_json:
        print_json(result.to_json())
    else:
        _print_human(result)
    sys.exit(0 if result.status == "ok" and result.verified is not False else 1)
