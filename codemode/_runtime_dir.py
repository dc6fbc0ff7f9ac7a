"""Where a codemode process keeps what only matters while processes it started may be running,
and how it knows a process it recorded is still that process.

A runtime directory (``/run`` for root, else ``$XDG_RUNTIME_DIR``, else the temporary folder
with the uid in the name) is this user's and is emptied at boot, when every pid in it has lost
its meaning. A pid alone may since name another process; with its start time it does not.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import psutil

__all__ = ["runtime_dir", "same_process"]


def runtime_dir(name: str) -> Path:
    """The runtime directory ``name`` (not created): ``/run/<name>`` for root, else
    ``$XDG_RUNTIME_DIR/<name>``, else ``<tmp>/<name>-<uid>``."""
    if os.geteuid() == 0:
        return Path("/run") / name
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and Path(runtime).is_dir():
        return Path(runtime) / name
    return Path(tempfile.gettempdir()) / f"{name}-{os.geteuid()}"


def same_process(pid: int, started: float) -> bool:
    """Whether ``pid`` is still the process that started at ``started`` (not gone, not reused)."""
    try:
        return abs(psutil.Process(pid).create_time() - started) < 0.01
    except psutil.Error:
        return False
