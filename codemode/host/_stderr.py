"""Keep the last lines a server wrote to stderr, in bounded memory and without touching disk.

The SDK's stdio transport wants a real file for the child's stderr. We hand it the write end
of a pipe and drain the read end in a daemon thread into a ring buffer, so a chatty or hostile
server can neither fill the disk nor grow our memory, and a failure message can quote the
tail of what the server said.
"""

from __future__ import annotations

import collections
import contextlib
import os
import threading
from typing import TextIO

_MAX_LINE = 2_000


class StderrTail:
    def __init__(self, max_lines: int = 40) -> None:
        self._lines: collections.deque[str] = collections.deque(maxlen=max_lines)
        self._partial = b""
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
                data = self._partial + chunk
                *complete, self._partial = data.split(b"\n")
                self._partial = self._partial[-_MAX_LINE:]
                for line in complete:
                    self._lines.append(line[:_MAX_LINE].decode("utf-8", "replace").rstrip("\r"))

    def tail(self) -> str:
        with self._lock:
            lines = list(self._lines)
            if self._partial:
                lines.append(self._partial.decode("utf-8", "replace"))
        return "\n".join(lines)

    def close(self) -> None:
        """Close our copy of the write end; the thread ends once the child's copy closes too."""
        with contextlib.suppress(OSError):
            self.writer.close()
        self._thread.join(timeout=2.0)
        if not self._thread.is_alive():
            self._reader.close()
