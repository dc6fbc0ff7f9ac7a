"""Pieces shared by every command: the --config and --json options, error reporting, output."""

from __future__ import annotations

import contextlib
import functools
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn, ParamSpec, TypeVar, get_args

import click
from rich.console import Console
from rich.markup import escape

from codemode.config import BackendChoice, Config, default_config_path, load_config
from codemode.errors import CodemodeError

P = ParamSpec("P")
R = TypeVar("R")

EXIT_USAGE = 2
EXIT_FAILURE = 1

BACKEND_CHOICE = click.Choice(list(get_args(BackendChoice)))
"""``--backend``'s values: the config's ``[sandbox] backend`` choices, named once there."""

stdout = Console(soft_wrap=True)
stderr = Console(stderr=True, soft_wrap=True)


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
    return stderr.status(message) if show else contextlib.nullcontext()


def fail(message: str, *, hint: str | None = None, code: int = EXIT_FAILURE) -> NoReturn:
    # Messages name config sections and selectors ("[ledger] url", "SERVER[/TOOL]"): text, not markup.
    stderr.print(f"[bold red]error:[/] {escape(message)}", markup=True, highlight=False)
    if hint:
        stderr.print(f"[dim]hint:[/] {escape(hint)}", markup=True, highlight=False)
    sys.exit(code)


def handle_errors(fn: Callable[P, R]) -> Callable[P, R]:
    """Turn codemode's own errors into a one-screen message and exit status 2, without a traceback."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except CodemodeError as exc:
            stderr.print(f"[bold red]error:[/] {escape(str(exc))}", markup=True, highlight=False)
            sys.exit(EXIT_USAGE)
        except KeyboardInterrupt:
            stderr.print("interrupted")
            sys.exit(130)

    return wrapper


def load(config_path: Path | None) -> Config:
    return load_config(default_config_path(config_path))


def print_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, ensure_ascii=False, default=str))
