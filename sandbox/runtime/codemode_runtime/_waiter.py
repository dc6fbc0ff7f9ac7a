"""One stub call's answer, and the wake-up of the thread that waits for it (see ``_client``)."""

from __future__ import annotations

import threading
from typing import Any


class Waiter:
    """One request's answer, and the wake-up of the thread that waits for it.

    The wake-up is a bare lock, held while there is nothing to wake for, not a
    ``threading.Event``: a signal handler that raises inside ``Event.wait`` can leave the event's
    inner lock held, and the next ``set`` from the thread reading would then hang it, and with it
    every call. A lock's ``acquire`` is one C call. The channel's lock guards ``woken``.
    """

    __slots__ = ("done", "error", "gate", "value", "waiting", "woken")

    def __init__(self) -> None:
        self.gate = threading.Lock()
        self.gate.acquire()
        self.woken = False
        self.done = False
        self.waiting = False
        """Its thread is blocked on ``gate`` (so it can be handed the read role)."""
        self.value: Any = None
        self.error: BaseException | None = None

    def wake(self) -> None:
        """Let its thread go on (the channel's lock held); once until it has gone to sleep again."""
        if not self.woken:
            self.woken = True
            self.gate.release()

    def ready_to_sleep(self) -> None:
        """Mark its thread as about to sleep, taking back a wake-up it has not slept through (the
        channel's lock held): woken again by its answer, or when handed the read role."""
        if self.woken:
            self.woken = False
            self.gate.acquire(blocking=False)
        self.waiting = True

    def sleep(self, lock: threading.Lock) -> None:
        """Sleep until woken; then, under the channel's ``lock``, awake and not waiting."""
        self.gate.acquire()
        with lock:
            self.woken = self.waiting = False
