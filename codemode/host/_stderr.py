"""Keep the last lines a server wrote to stderr, in bounded memory and without touching disk.

The SDK's stdio transport wants a real file for the child's stderr. We hand it the write end
of a pipe and drain the read end in a daemon thread into a ring buffer, so a chatty or hostile
server can neither fill the disk nor grow our memory, and a failure message can quote the
tail of what the server said.

The tail is shown (``codemode servers``, connection errors) and a server writes what it likes
there, its own credential included: :meth:`StderrTail.tail` hides secrets, known values first.
Where a line is cut to bound it, the word cut in two is dropped as well: half a token is no
safer than the whole, and no rule can recognise it any more.
"""

from __future__ import annotations

import collections
import contextlib
import os
import re
import threading
from typing import TextIO

from codemode._redaction import redact_secrets

_MAX_LINE = 2_000
_CUT = "…".encode()
_LAST_WORD = re.compile(rb"\S+\Z")
_FIRST_WORD = re.compile(rb"\A\S+")


def _keep_head(line: bytes) -> bytes:
    """The first :data:`_MAX_LINE` bytes of ``line``, without the word the cut runs through."""
    if len(line) <= _MAX_LINE:
        return line
    kept = line[:_MAX_LINE]
    if not line[_MAX_LINE : _MAX_LINE + 1].isspace():
        kept = _LAST_WORD.sub(b"", kept)
    return kept + _CUT


def _keep_tail(data: bytes) -> tuple[bytes, bool]:
    """The last :data:`_MAX_LINE` bytes of an unfinished line, without the word the cut runs
    through; and whether all of ``data`` was that word (then the next chunk starts inside it)."""
    if len(data) <= _MAX_LINE:
        return data, False
    kept = data[-_MAX_LINE:]
    if not data[-_MAX_LINE - 1 : -_MAX_LINE].isspace():
        kept = _FIRST_WORD.sub(b"", kept)
    return _CUT + kept, not kept


class StderrTail:
    def __init__(self, max_lines: int = 40) -> None:
        self._lines: collections.deque[str] = collections.deque(maxlen=max_lines)
        self._partial = b""
        self._mid_word = False
        """The line was cut inside a word that has not ended yet: its rest is dropped too."""
        self._lock = threading.Lock()
        read_fd, write_fd = os.pipe()
        os.set_inheritable(write_fd, True)
        self._reader = os.fdopen(read_fd, "rb", buffering=0)
        self.writer: TextIO = os.fdopen(write_fd, "w", encoding="utf-8", errors="replace")
        self._thread = threading.Thread(target=self._drain, name="codemode-stderr", daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        while True:
            try:
                chunk = self._reader.read(65_536)
            except OSError:
                return
            if not chunk:
                return
            with self._lock:
                if self._mid_word:
                    rest = _FIRST_WORD.sub(b"", chunk)
                    if not rest:
                        continue  # the whole chunk is still inside that word
                    chunk, self._mid_word = rest, False
                data = self._partial + chunk
                *complete, partial = data.split(b"\n")
                self._partial, self._mid_word = _keep_tail(partial)
                for line in complete:
                    self._lines.append(_keep_head(line).decode("utf-8", "replace").rstrip("\r"))

    def tail(self) -> str:
        """The last lines, secrets hidden (redacted on the way out: a value remembered after the
        line arrived is hidden too)."""
        with self._lock:
            lines = list(self._lines)
            if self._partial:
                lines.append(self._partial.decode("utf-8", "replace"))
        return redact_secrets("\n".join(lines))[0]

    def close(self) -> None:
        """Close our copy of the write end; the thread ends once the child's copy closes too."""
        with contextlib.suppress(OSError):
            self.writer.close()
        self._thread.join(timeout=2.0)
        if not self._thread.is_alive():
            self._reader.close()
