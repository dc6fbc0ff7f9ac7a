"""Counting a store's write commits and waking the threads that wait for the next one.

Both stores implement the Protocol's ``commits`` / ``wait_for_commit`` with it. It sees only the
commits made through one store object; a waiter on another client polls, as the Protocol allows.
"""

from __future__ import annotations

import threading

__all__ = ["CommitSignal"]


class CommitSignal:
    def __init__(self) -> None:
        self._count = 0
        self._changed = threading.Condition(threading.Lock())

    def committed(self) -> None:
        """A write transaction of this store committed."""
        with self._changed:
            self._count += 1
            self._changed.notify_all()

    def count(self) -> int:
        with self._changed:
            return self._count

    def wait(self, seen: int, timeout_s: float) -> None:
        """Return once the count differs from ``seen``, or after ``timeout_s``."""
        with self._changed:
            if self._count == seen:
                self._changed.wait(max(0.0, timeout_s))

    def wake(self) -> None:
        """Wake every waiter without a commit (the store is closing)."""
        with self._changed:
            self._changed.notify_all()
