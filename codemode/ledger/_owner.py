"""Who holds a lease, and whether that process still exists.

An owner is ``host:pid:started:nonce``. ``started`` (the process start time) guards against a
recycled pid; ``nonce`` tells apart two ledgers opened by one process. On the same host we can
tell that an owner is gone without waiting for its lease to expire; for another host (a shared
file system, not recommended for SQLite) only the lease expiry decides.
"""

from __future__ import annotations

import os
import secrets
import socket

import psutil


def _start_time(pid: int) -> float:
    return psutil.Process(pid).create_time()


def new_owner() -> str:
    pid = os.getpid()
    return f"{socket.gethostname()}:{pid}:{_start_time(pid):.2f}:{secrets.token_hex(4)}"


def owner_alive(owner: str | None) -> bool | None:
    """True/False when the owner's process is known alive/gone; None when we cannot tell."""
    if not owner:
        return None
    parts = owner.rsplit(":", 3)
    if len(parts) != 4 or parts[0] != socket.gethostname():
        return None
    try:
        pid, started = int(parts[1]), float(parts[2])
    except ValueError:
        return None
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return False
        # create_time is stable for a process; a different value means the pid was reused.
        return abs(process.create_time() - started) < 1.0
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:  # access denied and the like: it exists, we just cannot look closer
        return True
