"""Output capture and the interpreter state that runs of one sandbox share."""

from __future__ import annotations

import builtins
import io
import os
import sys
import threading
import types
from typing import TYPE_CHECKING, Protocol

from . import _wire as wire

if TYPE_CHECKING:
    from ._fresh import Baseline


class Capture(Protocol):
    """The captured output of one stream during one run."""

    def snapshot(self) -> tuple[str, bool]:
        """What was captured so far, and whether some was dropped over the cap."""
        ...

    def finish(self) -> tuple[str, bool]:
        """Stop capturing; what was captured, and whether some was dropped over the cap."""
        ...


def flush_std() -> None:
    """Flush Python's stdout and stderr; one the program closed or broke is its own business."""
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            pass


class CappedBuffer:
    """Bytes written to one stream, keeping at most ``cap`` of them; safe across threads.

    What arrives over the cap is dropped and remembered as truncation, so memory stays flat
    however much a program writes; after :meth:`close` nothing more is kept."""

    def __init__(self, cap: int) -> None:
        self._cap = cap
        self._lock = threading.Lock()
        self._chunks: list[bytes] = []
        self._size = 0
        self._truncated = False
        self._open = True

    def add(self, data: bytes) -> None:
        with self._lock:
            if not self._open:
                return
            room = self._cap - self._size
            if room > 0:
                kept = data[:room]
                self._chunks.append(kept)
                self._size += len(kept)
            if len(data) > room:
                self._truncated = True

    def snapshot(self) -> tuple[str, bool]:
        with self._lock:
            data = b"".join(self._chunks)
            truncated = self._truncated
        return data.decode("utf-8", errors="replace"), truncated

    def close(self) -> bool:
        """Keep nothing more; True the first time."""
        with self._lock:
            first, self._open = self._open, False
        return first


class FdCapture:
    """Captures one file descriptor (1 or 2) through a pipe, keeping at most ``cap`` bytes.

    Working at the descriptor level catches ``print``, ``os.write(1, ...)`` and child processes
    alike. The reader thread drains the pipe continuously into a :class:`CappedBuffer`.
    """

    def __init__(self, fd: int, cap: int) -> None:
        self._fd = fd
        self._buffer = CappedBuffer(cap)
        read_end, write_end = os.pipe()
        self._saved = os.dup(fd)
        os.dup2(write_end, fd)
        os.close(write_end)
        self._read_end = read_end
        self._thread = threading.Thread(target=self._pump, name=f"codemode-capture-{fd}", daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        try:
            while True:
                data = os.read(self._read_end, 65536)
                if not data:
                    return
                self._buffer.add(data)
        except OSError:
            return
        finally:
            os.close(self._read_end)

    def snapshot(self) -> tuple[str, bool]:
        return self._buffer.snapshot()

    def finish(self) -> tuple[str, bool]:
        os.dup2(self._saved, self._fd)
        os.close(self._saved)
        # EOF arrives once no process holds the write end; a background child may keep it open,
        # in which case what arrived so far is the output and the rest is dropped.
        self._thread.join(timeout=0.25)
        text, truncated = self._buffer.snapshot()
        self._buffer.close()
        return text, truncated


class Session:
    """Interpreter state shared by the runs of one sandbox (one run, or one explicit session).

    The in-process test runtime (``_embedded``) overrides what touches the whole process:
    ``sys.modules["__main__"]`` and the capture of file descriptors 1 and 2.
    """

    registers_main = True
    """Whether the program's module becomes ``sys.modules["__main__"]``."""

    def __init__(self, baseline: Baseline | None = None) -> None:
        self.baseline = baseline
        """How to start a fresh run clean (None: only its namespace is new, the test runtime's)."""
        self.module = self.fresh_module()
        self.count = 0
        self.out: Capture | None = None
        self.err: Capture | None = None

    def fresh_module(self) -> types.ModuleType:
        """A new, empty ``__main__`` (a batch worker starts each item with one)."""
        module = types.ModuleType("__main__")
        module.__dict__["__builtins__"] = builtins
        if self.registers_main:
            sys.modules["__main__"] = module
        self.module = module
        return module

    def begin(self, cap: int) -> tuple[Capture, Capture]:
        """Start capturing the next program's stdout and stderr, each kept to ``cap`` bytes."""
        # Whatever the last program did to sys.stdout, this one writes to the real streams,
        # line-buffered like a terminal so print() and os.write(1, ...) keep their order.
        sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__
        for stream in (sys.stdout, sys.stderr):
            if isinstance(stream, io.TextIOWrapper):
                stream.reconfigure(line_buffering=True)
        flush_std()
        return FdCapture(1, cap), FdCapture(2, cap)


def snapshot(session: Session) -> wire.Snapshot:
    """The output of the program running now (what :data:`_wire.SNAPSHOT` answers)."""
    out, err = session.out, session.err
    stdout, stdout_truncated = out.snapshot() if out else ("", False)
    stderr, stderr_truncated = err.snapshot() if err else ("", False)
    return {
        "stdout": stdout,
        "stdout_truncated": stdout_truncated,
        "stderr": stderr,
        "stderr_truncated": stderr_truncated,
    }
