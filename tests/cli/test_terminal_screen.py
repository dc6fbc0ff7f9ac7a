"""The terminal question stays on the screen: ``codemode run``'s spinner pauses while a person is
asked (issue 39: the spinner's redraw erased the question and the screen showed "⠴ running…yes").

The screen is what a terminal would show: the bytes written to a real pseudo-terminal, played
through a small emulation of the carriage return, cursor-up and erase-line that the spinner uses.
"""

from __future__ import annotations

import codecs
import contextlib
import fcntl
import os
import re
import select
import sqlite3
import struct
import subprocess
import sys
import termios
import threading
from collections.abc import Callable, Generator
from pathlib import Path

import pytest

from codemode.broker import ApprovalRequest, ElicitationRequest, TerminalApprover, TerminalElicitor
from tests.broker import test_terminal_approver
from tests.broker.test_terminal_approver import PROMPT, Pty

pty_pair = test_terminal_approver.pty_pair
workspace = test_terminal_approver.workspace
"""The approver's tests' fixtures: a pseudo-terminal, and a workspace whose program writes a note."""

QUESTION = "approve this one call? [y/N]"
QUIET_S = 2.0
"""How long the screen must stay still after the question before it is answered. The spinner
redraws 12.5 times a second, so an unpaused one shows up well within this; a paused one never
does, so a slow machine can only make the test miss the bug, never fail a correct build."""

_CSI = re.compile(r"\x1b\[([0-9;?]*)([A-Za-z])")
_OSC = re.compile(r"\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)")


class Screen:
    """Just enough of a terminal for a spinner: text, CR, LF, cursor up/down and erase in line."""

    def __init__(self) -> None:
        self.lines: list[list[str]] = [[]]
        self.row = 0
        self.col = 0
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._pending = ""

    def feed(self, data: bytes) -> None:
        text = self._pending + self._decoder.decode(data)
        self._pending = ""
        text = _OSC.sub("", text)
        at = 0
        while at < len(text):
            char = text[at]
            if char == "\x1b":
                match = _CSI.match(text, at)
                if match is None:
                    self._pending = text[at:]  # an escape cut between two reads: finish it next time
                    return
                self._control(match.group(1), match.group(2))
                at = match.end()
                continue
            if char == "\r":
                self.col = 0
            elif char == "\n":
                self._move_to(self.row + 1)
            elif char >= " ":
                line = self.lines[self.row]
                line.extend(" " * (self.col - len(line)))
                if self.col < len(line):
                    line[self.col] = char
                else:
                    line.append(char)
                self.col += 1
            at += 1

    def text(self) -> list[str]:
        return ["".join(line).rstrip() for line in self.lines]

    def _move_to(self, row: int) -> None:
        self.row = max(0, row)
        while len(self.lines) <= self.row:
            self.lines.append([])

    def _control(self, params: str, final: str) -> None:
        count = int(params) if params.isdigit() else 1
        line = self.lines[self.row]
        if final == "A":
            self._move_to(self.row - count)
        elif final == "B":
            self._move_to(self.row + count)
        elif final == "G":
            self.col = count - 1
        elif final == "K" and params in ("", "0"):
            del line[self.col :]
        elif final == "K" and params == "2":
            line.clear()
        # colours, cursor show/hide and the rest change nothing a reader sees


def test_the_screen_emulation_sees_a_line_overwritten() -> None:
    screen = Screen()
    screen.feed(b"  approve this one call? [y/N] ")
    screen.feed("\r\x1b[2K⠴ running…".encode())
    screen.feed(b"yes\r\n")
    assert screen.text()[0] == "⠴ running…yes", "the bug's screen, as issue 39 reported it"


# -- the seam: the approver and the elicitor pause whoever else draws, around each question ------


class PauseRecorder:
    def __init__(self) -> None:
        self.events: list[str] = []
        self.paused = False

    @contextlib.contextmanager
    def pause(self) -> Generator[None]:
        self.events.append("pause")
        self.paused = True
        try:
            yield
        finally:
            self.paused = False
            self.events.append("resume")


def answer_when(pty: Pty, prompt: bytes, key: bytes, recorder: PauseRecorder) -> threading.Thread:
    def answer() -> None:
        pty.read_until(prompt)
        recorder.events.append("asked while paused" if recorder.paused else "asked while drawing")
        os.write(pty.master, key)

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    return thread


@pytest.mark.anyio
@pytest.mark.parametrize(("key", "approved"), [(b"y", True), (b"n", False), (b"\x03", False)])
async def test_the_approver_pauses_around_its_question(pty_pair: Pty, key: bytes, approved: bool) -> None:
    recorder = PauseRecorder()
    approver = TerminalApprover(pty_pair.path, timeout_s=30, pause=recorder.pause)
    request = ApprovalRequest(
        call_id="run_1/1",
        principal="ann",
        tenant="acme",
        server="crm",
        tool="add_note",
        risk="high",
        why="writes",
        arguments_summary="{}",
        args_digest="0" * 64,
        expires_at=4_102_444_800.0,  # 2100: not expired
    )
    typist = answer_when(pty_pair, PROMPT, key, recorder)
    answer = await approver.ask(request)
    typist.join(5)
    assert answer.approved is approved
    assert recorder.events == ["pause", "asked while paused", "resume"]


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("mode", "prompt"), [("form", b"fill in the form"), ("url", b"done?")], ids=["form", "url"]
)
async def test_the_elicitor_pauses_around_its_conversation(pty_pair: Pty, mode: str, prompt: bytes) -> None:
    recorder = PauseRecorder()
    elicitor = TerminalElicitor(pty_pair.path, timeout_s=30, pause=recorder.pause)
    request = ElicitationRequest(
        call_id="run_1/1",
        principal="ann",
        tenant="acme",
        server="crm",
        tool="add_note",
        message="Which note?",
        mode="url" if mode == "url" else "form",
        schema={"properties": {"text": {"type": "string"}}},
        url="https://example.invalid/form" if mode == "url" else None,
    )
    typist = answer_when(pty_pair, prompt, b"\n", recorder)
    answer = await elicitor.elicit(request)
    typist.join(5)
    assert answer.action == "decline"
    assert recorder.events == ["pause", "asked while paused", "resume"]


# -- codemode run on a real terminal ---------------------------------------------------------------


def read_while_output_comes(pty: Pty, quiet_s: float, until: Callable[[], bool] = lambda: False) -> None:
    """Read until nothing more arrives for ``quiet_s``, the other side closes, or ``until()``."""
    while not until():
        ready, _, _ = select.select([pty.master], [], [], quiet_s)
        if not ready:
            return
        try:
            chunk = os.read(pty.master, 4096)
        except OSError:
            return
        if not chunk:
            return
        pty.seen += chunk


def screen_of(data: bytes) -> list[str]:
    screen = Screen()
    screen.feed(data)
    return screen.text()


def last_line(data: bytes) -> str:
    """The last line with something on it, as the screen shows it."""
    return next((line.strip() for line in reversed(screen_of(data)) if line.strip()), "")


@pytest.mark.integration
def test_codemode_run_keeps_the_approval_question_on_the_screen(workspace: Path) -> None:
    pair = Pty()
    slave = pair.slave
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))

    def controlling_terminal() -> None:
        os.setsid()
        fcntl.ioctl(slave, termios.TIOCSCTTY, 0)

    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "120", "LINES": "40"}
    for name in ("NO_COLOR", "TERM_PROGRAM", "CI", "FORCE_COLOR"):
        env.pop(name, None)  # rich draws no spinner on a terminal it thinks is dumb or a CI log
    command = [sys.executable, "-m", "codemode.cli", "run", str(workspace.parent / "prog.py")]
    try:
        process = subprocess.Popen(
            [*command, "--config", str(workspace)],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=env,
            preexec_fn=controlling_terminal,
            close_fds=True,
        )
        os.close(slave)
        pair.slave = -1
        pair.read_until(PROMPT, timeout=120)
        read_while_output_comes(pair, QUIET_S, until=lambda: last_line(pair.seen) != QUESTION)
        assert "running…" in pair.seen.decode(errors="replace"), "the spinner was shown before the question"
        assert last_line(pair.seen) == QUESTION, f"the question is overwritten: {screen_of(pair.seen)[-3:]}"
        os.write(pair.master, b"y")
        code = process.wait(timeout=120)
        read_while_output_comes(pair, 5)  # the rest, until the terminal closes
    finally:
        pair.close()
    final = screen_of(pair.seen)
    assert any(line.strip() == f"{QUESTION} yes" for line in final), final
    assert not any("running…yes" in line for line in final), final
    assert code == 0, "\n".join(final[-20:])
    with sqlite3.connect(workspace.parent / "crm" / "writes.sqlite3") as conn:
        assert conn.execute("SELECT COUNT(*) FROM writes").fetchone()[0] == 1
