"""A queue for writers of one ledger file, across threads and processes.

SQLite serialises writers itself, but a writer that finds the file locked sleeps in growing
steps (up to 100 ms) before it looks again, so under contention the tail latency is poor.
Writers therefore first take an ``flock`` on a sidecar file (``<ledger>.lock``) and look
again within at most 2 ms. The lock is only a queue: correctness still comes from
``BEGIN IMMEDIATE`` inside it. The kernel drops the lock of a killed process.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Generator

from codemode.errors import LedgerError

_MAX_DELAY_S = 0.002


class WriterGate:
    def __init__(self, lock_path: str | None, timeout_s: float) -> None:
        self._timeout_s = timeout_s
        self._fd: int | None = None
        if lock_path is not None:
            try:
                self._fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            except OSError as exc:
                raise LedgerError(f"cannot open the ledger's lock file {lock_path}: {exc}") from exc

    @contextlib.contextmanager
    def held(self) -> Generator[None]:
        fd = self._fd
        if fd is None:
            yield
            return
        deadline = time.monotonic() + self._timeout_s
        delay = 0.0001
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise LedgerError(
                        f"the ledger stayed locked by another writer for {self._timeout_s:.0f} s"
                    ) from None
                time.sleep(delay)
                delay = min(delay * 2, _MAX_DELAY_S)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
