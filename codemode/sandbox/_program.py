"""One program to run, as every run layer passes it on: the manager, a session, a live sandbox.

Who the run acts for (the :class:`~codemode.calls.RunBinding`), where its imports and calls go
(the module provider and call handler) stay apart: they belong to the host, not the program.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Program", "WorkspaceFiles", "WorkspaceQuota"]

PAGE = 4096


@dataclass(frozen=True)
class WorkspaceQuota:
    """What a sandbox's workspace may hold: the backends that can, cap it in the kernel."""

    bytes: int
    files: int
    """Files and directories."""

    @property
    def tmpfs_bytes(self) -> int:
        """The size of a tmpfs that holds the quota: a tmpfs counts whole pages, so each entry may
        take a page more than its bytes (the runtime checks the exact bytes when the program ends)."""
        return self.bytes + (self.files + 1) * PAGE


@dataclass(frozen=True)
class WorkspaceFiles:
    """A run's workspace as it starts: its files, and the quota the sandbox holds it to."""

    files: Mapping[str, bytes]
    """Relative POSIX path -> content (checked by whoever loaded them)."""
    quota_bytes: int
    quota_files: int
    """Files and directories."""


@dataclass(frozen=True)
class Program:
    """The code of one run, with what it starts from and how long it may take."""

    code: str
    bindings: Mapping[str, Any] = field(default_factory=dict[str, Any])
    """Set as globals before the code runs: JSON values by identifier (a batch item's ``INPUT``)."""
    wall_time_s: float | None = None
    """The run's wall-time limit; None: the sandbox configuration's ``wall_time_s``."""
    fresh: bool = False
    """Start clean in a reused (session) sandbox, as a new one always does: an empty namespace,
    the sandbox's scratch directories (``/tmp``, ``/dev/shm``, the working directory) emptied,
    every process of earlier runs killed, modules and the environment as before the first run.
    The run's own processes are killed when it ends (a batch item's)."""
    workspace: WorkspaceFiles | None = None
    """Written to the sandbox's workspace before the code runs; the outcome then says what the
    workspace held at the end. None: the run has no workspace."""
