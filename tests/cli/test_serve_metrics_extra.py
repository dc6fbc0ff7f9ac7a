"""``codemode serve --metrics`` without the otel extra says so in one line and exits 2 (issue 39:
it printed the line under a 70-line ExceptionGroup traceback and exited 1), and the class behind
it: codemode's own errors raised inside a task group are still a message, not a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from codemode.cli._common import EXIT_USAGE, handle_errors
from codemode.errors import CodemodeError, ConfigError, LedgerError

# The extra is missing for this process only: a None in sys.modules makes the import fail as an
# absent package does (ImportError), whatever is installed.
WITHOUT_PROMETHEUS = (
    "import sys; sys.modules['prometheus_client'] = None; "
    "sys.argv[0] = 'codemode'; from codemode.cli import main; main()"
)
SERVE = [sys.executable, "-c", WITHOUT_PROMETHEUS, "serve", "--transport", "http", "--port", "0"]


@pytest.mark.integration
def test_serve_metrics_without_the_extra_is_one_line_and_exit_2(tmp_path: Path) -> None:
    config = tmp_path / "codemode.toml"
    config.write_text('[sandbox]\nbackend = "process"\npool_size = 0\n', encoding="utf-8")
    done = subprocess.run(
        [*SERVE, "--metrics", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == EXIT_USAGE, done.stderr
    assert "Traceback" not in done.stderr and "ExceptionGroup" not in done.stderr, done.stderr
    # The process backend's own warning may come first; the error is one line, and the last.
    lines = [line for line in done.stderr.splitlines() if not line.startswith("WARNING:codemode.sandbox")]
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("error: --metrics needs prometheus_client")
    assert "pip install 'codemode[otel]'" in lines[0]


def _exit_of(error: BaseException, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    @handle_errors
    def command() -> None:
        raise error

    with pytest.raises(SystemExit) as exited:
        command()
    return int(exited.value.code or 0), capsys.readouterr().err


@pytest.mark.parametrize(
    ("group", "messages"),
    [
        (ExceptionGroup("one task", [CodemodeError("no otel extra")]), ["no otel extra"]),
        (
            ExceptionGroup("nested", [ExceptionGroup("inner", [LedgerError("the ledger is locked")])]),
            ["the ledger is locked"],
        ),
        (
            ExceptionGroup("two", [ConfigError("codemode.toml", [("serve", "bad")]), LedgerError("locked")]),
            ["codemode.toml: invalid configuration", "locked"],
        ),
    ],
    ids=["one", "nested", "two"],
)
def test_codemode_errors_inside_a_task_group_are_messages(
    group: ExceptionGroup[Exception], messages: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = _exit_of(group, capsys)
    assert code == EXIT_USAGE
    assert "Traceback" not in err and "ExceptionGroup" not in err
    assert [line for line in err.splitlines() if line.startswith("error: ")] == [
        f"error: {message}" for message in messages
    ]


def test_the_same_error_from_two_tasks_is_said_once(capsys: pytest.CaptureFixture[str]) -> None:
    group = ExceptionGroup("two tasks", [CodemodeError("no extra"), CodemodeError("no extra")])
    code, err = _exit_of(group, capsys)
    assert code == EXIT_USAGE
    assert err.count("error: no extra") == 1


@pytest.mark.parametrize(
    "group",
    [
        ExceptionGroup("a bug", [RuntimeError("a bug in codemode")]),
        ExceptionGroup("mixed", [CodemodeError("bad config"), ValueError("a bug")]),
    ],
    ids=["foreign", "mixed"],
)
def test_a_group_with_any_other_error_keeps_its_traceback(group: ExceptionGroup[Exception]) -> None:
    @handle_errors
    def command() -> None:
        raise group

    with pytest.raises(ExceptionGroup) as raised:
        command()
    assert raised.value is group, "nothing is lost: the very group goes on"
