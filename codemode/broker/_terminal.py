"""Asking a person at the controlling terminal: one key, with a timeout, Ctrl-C meaning no.

The terminal is opened with ``os.open(O_RDWR | O_NOCTTY)``: a tty is not seekable, so Python's
buffered ``open(path, "r+")`` refuses it (the bug this module replaced). The answer is one key
read in non-canonical mode with signals off, so Ctrl-C and Ctrl-D arrive as bytes and mean
"deny" instead of killing the run. The terminal's settings are always restored.
"""

from __future__ import annotations

import contextlib
import os
import select
import termios
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

from codemode._redaction import redact_secrets

QuestionPause = Callable[[], contextlib.AbstractContextManager[object]]
"""Entered around each question on the terminal, from the thread that asks: whoever else draws on
that screen (``codemode run``'s spinner) stops while the person reads and answers, since a redraw
would overwrite the question line, and goes on after."""

CTRL_C = b"\x03"
CTRL_D = b"\x04"
YES = (b"y", b"Y")


@dataclass(frozen=True)
class TerminalAnswer:
    approved: bool
    reason: str


def terminal_available(tty_path: str = "/dev/tty") -> bool:
    """Whether a person can be asked on ``tty_path`` (a controlling terminal that opens)."""
    try:
        fd = os.open(tty_path, os.O_RDWR | os.O_NOCTTY)
    except OSError:
        return False
    try:
        return os.isatty(fd)
    finally:
        os.close(fd)


class NoTerminal(Exception):
    """Nobody can be asked: the terminal does not open, or is not a terminal (the message says which)."""


@contextlib.contextmanager
def opened_terminal(tty_path: str, adjust: Callable[[list[Any]], None]) -> Generator[int]:
    """``tty_path`` opened for one question: its settings changed by ``adjust`` (termios
    attributes, in place), typed-ahead input discarded, and everything restored and closed after.

    Raises:
        NoTerminal: it cannot be opened, or it is not a terminal.
    """
    try:
        fd = os.open(tty_path, os.O_RDWR | os.O_NOCTTY)
    except OSError as exc:
        raise NoTerminal(f"no terminal to ask on ({exc.strerror or exc})") from None
    try:
        if not os.isatty(fd):
            raise NoTerminal(f"{tty_path} is not a terminal")
        saved = termios.tcgetattr(fd)
        try:
            changed = termios.tcgetattr(fd)
            adjust(changed)
            termios.tcsetattr(fd, termios.TCSANOW, changed)
            termios.tcflush(fd, termios.TCIFLUSH)  # keys typed before the question do not answer it
            yield fd
        finally:
            termios.tcsetattr(fd, termios.TCSANOW, saved)
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)


def _one_key(attributes: list[Any]) -> None:
    attributes[3] &= ~(termios.ICANON | termios.ECHO | termios.ISIG)  # lflags: one key, no echo, no signals
    attributes[6][termios.VMIN] = 1
    attributes[6][termios.VTIME] = 0


def ask_on_terminal(tty_path: str, question: str, timeout_s: float) -> TerminalAnswer:
    """Write ``question`` to the terminal and wait up to ``timeout_s`` for one key (y = approve)."""
    try:
        with opened_terminal(tty_path, _one_key) as fd:
            os.write(fd, redact_secrets(question)[0].encode("utf-8", "replace"))
            key = _read_key(fd, timeout_s)
            if key is None:
                os.write(fd, b"\r\n(no answer: denied)\r\n")
                return TerminalAnswer(False, f"no answer within {timeout_s:g} s")
            approved = key in YES
            os.write(fd, b"yes\r\n" if approved else b"no\r\n")
    except NoTerminal as exc:
        return TerminalAnswer(False, f"{exc}; approve with 'codemode approve'")
    if approved:
        return TerminalAnswer(True, "")
    if key in (CTRL_C, CTRL_D):
        return TerminalAnswer(False, "cancelled at the terminal")
    return TerminalAnswer(False, "declined")


def _read_key(fd: int, timeout_s: float) -> bytes | None:
    deadline = time.monotonic() + timeout_s
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            data = os.read(fd, 1)
            return data or CTRL_D  # end of file: nobody is there to say yes
