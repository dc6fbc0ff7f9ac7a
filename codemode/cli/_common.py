"""Pieces shared by every command: the --config and --json options, error reporting, output."""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, ParamSpec, TypeVar, cast, get_args

import click

from codemode.errors import CodemodeError

if TYPE_CHECKING:
    from rich.console import Console

    from codemode.config import Config

P = ParamSpec("P")
R = TypeVar("R")

EXIT_USAGE = 2
EXIT_FAILURE = 1

# ``stdout``, ``stderr`` (rich consoles) and ``BACKEND_CHOICE`` are made on first use (see
# __getattr__): rich and the pydantic config models cost ~110 ms to import, and a cached
# ``codemode search --json`` needs neither. Declared here so that type checkers see them.
if TYPE_CHECKING:
    stdout: Console
    stderr: Console
    BACKEND_CHOICE: click.Choice[str]
    """``--backend``'s values: the config's ``[sandbox] backend`` choices, named once there."""


def __getattr__(name: str) -> object:
    if name in ("stdout", "stderr"):
        return console(name == "stderr")
    if name == "BACKEND_CHOICE":
        from codemode.config import BackendChoice

        choice = click.Choice(list(get_args(BackendChoice)))
        globals()[name] = choice  # made once: later lookups find the module attribute
        return choice
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def console(to_stderr: bool) -> Console:
    """The rich console on stderr or stdout (``stderr`` / ``stdout``), made on first use."""
    from rich.console import Console

    name = "stderr" if to_stderr else "stdout"
    made = globals().get(name)
    if not isinstance(made, Console):
        made = Console(stderr=to_stderr, soft_wrap=True)
        globals()[name] = made
    return made


def config_option(fn: Callable[P, R]) -> Callable[P, R]:
    """``--config PATH``: default ``$CODEMODE_CONFIG``, else ``./codemode.toml``."""
    return click.option(
        "--config",
        "config_path",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        help="Config file [default: $CODEMODE_CONFIG or ./codemode.toml]. State such as the lock "
        "file and the ledger lives beside it.",
    )(fn)


def json_option(fn: Callable[P, R]) -> Callable[P, R]:
    return click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON on stdout.")(fn)


def progress(message: str, show: bool = True) -> contextlib.AbstractContextManager[object]:
    """A spinner with ``message`` on stderr while the block runs (nothing when ``show`` is false)."""
    return console(True).status(message) if show else contextlib.nullcontext()


def fail(message: str, *, hint: str | None = None, code: int = EXIT_FAILURE) -> NoReturn:
    _report("[bold red]error:[/]", message, hint)
    sys.exit(code)


def warn(message: str, *, hint: str | None = None) -> None:
    """A warning on stderr, worded as :func:`fail` words errors; the command goes on."""
    _report("[yellow]warning:[/]", message, hint)


class _WarningLines(logging.Handler):
    """codemode's logged warnings as the command's own ``warning:`` lines (see :func:`show_warnings`)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            warn(record.getMessage())
        except Exception:
            self.handleError(record)


def show_warnings() -> None:
    """Print what codemode warns of while a command runs (a server that did not start, a server
    whose tools changed) as :func:`warn` lines on stderr: with the command's own wording and
    above its spinner, not as bare log lines written over it. Once per process."""
    logger = logging.getLogger("codemode")
    if not any(isinstance(handler, _WarningLines) for handler in logger.handlers):
        logger.addHandler(_WarningLines(logging.WARNING))


def _report(label: str, message: str, hint: str | None) -> None:
    from rich.markup import escape

    # Messages name config sections and selectors ("[ledger] url", "SERVER[/TOOL]"): text, not markup.
    stderr = console(True)
    stderr.print(f"{label} {escape(message)}", markup=True, highlight=False)
    if hint:
        stderr.print(f"[dim]hint:[/] {escape(hint)}", markup=True, highlight=False)


def handle_errors(fn: Callable[P, R]) -> Callable[P, R]:
    """Turn codemode's own errors into a one-screen message and exit status 2, without a traceback."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except CodemodeError as exc:
            _report_errors([exc])
        except BaseExceptionGroup as group:
            # An error raised inside a task group (``codemode serve`` starts its parts in one)
            # arrives wrapped; when every error in it is codemode's own, it is still a message.
            own, other = group.split(CodemodeError)
            if own is None or other is not None:
                raise
            _report_errors(_leaves(own))
        except KeyboardInterrupt:
            console(True).print("interrupted")
            sys.exit(130)

    return wrapper


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    leaves: list[BaseException] = []
    for exc in group.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            leaves += _leaves(cast("BaseExceptionGroup[BaseException]", exc))
        else:
            leaves.append(exc)
    return leaves


def _report_errors(errors: list[BaseException]) -> NoReturn:
    from rich.markup import escape

    shown: set[str] = set()  # the same error from two tasks is said once
    for message in (str(exc) for exc in errors):
        if message not in shown:
            shown.add(message)
            console(True).print(f"[bold red]error:[/] {escape(message)}", markup=True, highlight=False)
    sys.exit(EXIT_USAGE)


def load(config_path: Path | None) -> Config:
    from codemode._redaction import install_log_redaction
    from codemode.config import default_config_path, load_config

    # Log records quote what servers say, a server may say a secret, and the config names the
    # secrets it knows: every record is redacted from here on, whoever logs it.
    install_log_redaction()
    return load_config(default_config_path(config_path))


def print_json(value: Any) -> None:
    # ASCII only: a server's name, version or error may hold bidi, zero-width or C1 control
    # characters (U+009B acts as ESC [ on some terminals), which JSON leaves raw otherwise.
    click.echo(json.dumps(value, indent=2, ensure_ascii=True, default=str))
