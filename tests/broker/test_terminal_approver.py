"""The terminal approver on a real pseudo-terminal: yes, no, Ctrl-C, timeout, no terminal, and
``codemode run`` asking for a write tool's approval at its controlling terminal."""

from __future__ import annotations

import contextlib
import json
import os
import select
import sqlite3
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import pytest

from codemode.broker import ApprovalRequest, TerminalApprover
from codemode.broker._terminal import ask_on_terminal, terminal_available
from codemode.testing import FakeClock

REPO = Path(__file__).resolve().parents[2]
CRM = REPO / "examples" / "servers" / "crm_server.py"
PROMPT = b"[y/N]"


class Pty:
    def __init__(self) -> None:
        self.master, self.slave = os.openpty()
        self.path = os.ttyname(self.slave)
        self.seen = b""

    def read_until(self, marker: bytes, timeout: float = 60.0) -> bytes:
        deadline = time.monotonic() + timeout
        while marker not in self.seen:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"never saw {marker!r}; saw {self.seen[-2000:]!r}")
            ready, _, _ = select.select([self.master], [], [], left)
            if ready:
                try:
                    chunk = os.read(self.master, 4096)
                except OSError:  # the other side closed
                    break
                if not chunk:
                    break
                self.seen += chunk
        return self.seen

    def answer_when_asked(self, key: bytes) -> threading.Thread:
        def answer() -> None:
            self.read_until(PROMPT)
            os.write(self.master, key)

        thread = threading.Thread(target=answer, daemon=True)
        thread.start()
        return thread

    def close(self) -> None:
        for fd in (self.master, self.slave):
            with contextlib.suppress(OSError):
                os.close(fd)


@pytest.fixture
def pty_pair() -> Iterator[Pty]:
    pair = Pty()
    yield pair
    pair.close()


@pytest.mark.parametrize(
    ("key", "approved", "reason"),
    [
        (b"y", True, ""),
        (b"n", False, "declined"),
        (b"\x03", False, "cancelled"),
        (b"\x04", False, "cancelled"),
    ],
    ids=["yes", "no", "ctrl-c", "ctrl-d"],
)
def test_one_key_answers_and_the_terminal_settings_are_restored(
    pty_pair: Pty, key: bytes, approved: bool, reason: str
) -> None:
    before = termios.tcgetattr(pty_pair.slave)
    thread = pty_pair.answer_when_asked(key)
    answer = ask_on_terminal(pty_pair.path, "approve crm/add_note? [y/N] ", 30)
    thread.join(5)
    assert answer.approved is approved
    assert reason in answer.reason
    assert termios.tcgetattr(pty_pair.slave) == before, "echo, canonical mode and signals are back"


def test_no_answer_before_the_timeout_is_a_denial(pty_pair: Pty) -> None:
    started = time.monotonic()
    answer = ask_on_terminal(pty_pair.path, "approve? [y/N] ", 0.5)
    assert not answer.approved and "no answer within" in answer.reason
    assert time.monotonic() - started >= 0.5


def test_keys_typed_before_the_question_do_not_answer_it(pty_pair: Pty) -> None:
    os.write(pty_pair.master, b"y")
    time.sleep(0.1)
    answer = ask_on_terminal(pty_pair.path, "approve? [y/N] ", 0.5)
    assert not answer.approved, "a stray 'y' in the buffer must not approve"


def test_the_question_never_shows_a_secret(pty_pair: Pty) -> None:
    thread = pty_pair.answer_when_asked(b"n")
    ask_on_terminal(pty_pair.path, "arguments: {'password': 'hunter2-hunter2'} [y/N] ", 30)
    thread.join(5)
    assert b"hunter2-hunter2" not in pty_pair.seen


def test_without_a_terminal_it_denies_and_says_what_to_do(tmp_path: Path) -> None:
    plain = tmp_path / "not-a-tty"
    plain.write_text("")
    assert not terminal_available(str(plain))
    assert not terminal_available(str(tmp_path / "missing"))
    answer = ask_on_terminal(str(plain), "approve? ", 1)
    assert not answer.approved and "codemode approve" in answer.reason


# -- how long the approver asks: no longer than the approval lives, on the broker's clock ----------


def approval_request(expires_at: float) -> ApprovalRequest:
    return ApprovalRequest(
        call_id="run-1/0",
        principal="local",
        tenant="default",
        server="crm",
        tool="add_note",
        risk="high",
        why="crm/add_note is high risk",
        arguments_summary="{}",
        args_digest="sha256:" + "0" * 64,
        expires_at=expires_at,
    )


@pytest.mark.parametrize("past_s", [1.0, 86_400.0], ids=["a-second-ago", "a-day-ago"])
def test_an_approval_already_expired_on_the_clock_is_not_asked_for(pty_pair: Pty, past_s: float) -> None:
    """By the real time it has a minute left: a 'y' would approve it if the real time counted."""
    clock = FakeClock()
    request = approval_request(clock().timestamp() + 60)
    clock.advance(60 + past_s)
    thread = pty_pair.answer_when_asked(b"y")
    answer = anyio.run(TerminalApprover(pty_pair.path, clock=clock).ask, request)
    thread.join(5)
    assert not answer.approved and "no answer within 0 s" in answer.reason, answer


@pytest.mark.parametrize("behind_s", [3_600.0, 30 * 86_400.0], ids=["an-hour", "a-month"])
def test_an_approval_still_valid_on_the_clock_is_asked_for(pty_pair: Pty, behind_s: float) -> None:
    """By the real time it expired long ago: only the approver's clock says it has a minute left."""
    clock = FakeClock(datetime.now(UTC) - timedelta(seconds=behind_s))
    request = approval_request(clock().timestamp() + 60)
    thread = pty_pair.answer_when_asked(b"y")
    answer = anyio.run(TerminalApprover(pty_pair.path, clock=clock).ask, request)
    thread.join(5)
    assert answer.approved, answer


# -- codemode run under a real terminal ------------------------------------------------------------


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    config = tmp_path / "codemode.toml"
    config.write_text(
        f"[servers.crm]\ncommand = {json.dumps(sys.executable)}\nargs = [{json.dumps(str(CRM))}]\n"
        f"trusted = true\nenv = {{ CRM_STATE_DIR = {json.dumps(str(tmp_path / 'crm'))} }}\n\n"
        '[sandbox]\nbackend = "process"\n',
        encoding="utf-8",
    )
    for command in (["sync"], ["pin", "--approve"]):
        done = subprocess.run(
            [sys.executable, "-m", "codemode.cli", *command, "--config", str(config)],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr
    (tmp_path / "prog.py").write_text(
        'from servers.crm import add_note\nadd_note(customer_id="CUST-0001", text="asked at the terminal")\n',
        encoding="utf-8",
    )
    return config


def run_under_pty(config: Path, key: bytes) -> tuple[int, bytes]:
    pair = Pty()
    slave = pair.slave

    def controlling_terminal() -> None:
        os.setsid()
        import fcntl

        fcntl.ioctl(slave, termios.TIOCSCTTY, 0)

    try:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "codemode.cli",
                "run",
                str(config.parent / "prog.py"),
                "--config",
                str(config),
            ],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            preexec_fn=controlling_terminal,
            close_fds=True,
        )
        os.close(slave)  # the child holds the terminal now; the master sees EOF when it exits
        pair.slave = -1
        pair.read_until(PROMPT, timeout=120)
        os.write(pair.master, key)
        code = process.wait(timeout=120)
        with contextlib.suppress(AssertionError):
            pair.read_until(b"\x00end of output\x00", timeout=10)  # drain until EOF
        return code, pair.seen
    finally:
        pair.close()


def notes_written(config: Path) -> int:
    path = config.parent / "crm" / "writes.sqlite3"
    if not path.exists():
        return 0
    with sqlite3.connect(path) as conn:
        return int(conn.execute("SELECT COUNT(*) FROM writes").fetchone()[0])


@pytest.mark.integration
def test_codemode_run_asks_at_the_terminal_and_y_runs_the_write(workspace: Path) -> None:
    code, screen = run_under_pty(workspace, b"y")
    assert b"crm/add_note" in screen and b"risk" in screen and b"expires" in screen
    assert code == 0, screen.decode(errors="replace")[-2000:]
    assert notes_written(workspace) == 1


@pytest.mark.integration
def test_codemode_run_asks_at_the_terminal_and_n_denies_the_write(workspace: Path) -> None:
    code, screen = run_under_pty(workspace, b"n")
    assert b"not given by terminal" in screen, screen.decode(errors="replace")[-2000:]
    assert notes_written(workspace) == 0
    assert code != 0 or b"CallDenied" in screen
