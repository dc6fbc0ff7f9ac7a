"""The seam between the sandbox machinery and one way of isolating a program.

A backend starts a sandbox whose runtime will connect to a prepared channel directory, and can
say why a sandbox ended. Everything else (channel, pool, runs, outcomes) is shared.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from codemode._run_usage import CapHit
from codemode.config import SandboxConfig
from codemode.sandbox._outcome import BackendName, ErrorKind
from codemode.sandbox._state import StateDir
from codemode.sandbox._usage_meter import UsageMeter

__all__ = ["Backend", "BackendFactory", "Launch", "SandboxInstance", "Termination"]


@dataclass(frozen=True)
class Launch:
    """One sandbox about to start."""

    sandbox_id: str
    root: Path
    """Host-only directory for the backend's bookkeeping (meta.json, logs)."""
    channel_dir: Path
    """The directory with the channel socket and secret: the only host path the sandbox sees."""
    owner: tuple[int, int] | None
    """(uid, gid) the sandbox runs as when the host can give the channel directory to it."""


@dataclass(frozen=True)
class Termination:
    """Why a sandbox stopped (or was stopped) before answering."""

    kind: ErrorKind
    type: str
    message: str
    cap: CapHit | None = None
    """The cap that stopped the sandbox, when a cap did."""


class SandboxInstance(Protocol):
    @property
    def sandbox_id(self) -> str: ...

    @property
    def meter(self) -> UsageMeter:
        """Measures each run's CPU, peak memory and caps hit (one meter for the sandbox's life)."""
        ...

    async def watch(self) -> Termination:
        """Return only when the backend had to stop the sandbox for a limit it enforces itself
        (the process backend's memory and process-count watchdog); otherwise wait forever."""
        ...

    async def exit_reason(self) -> str | None:
        """A reason if the sandbox has already exited (polled while waiting for it to connect)."""
        ...

    async def termination(self) -> Termination:
        """After the channel ended unexpectedly: why the sandbox stopped (waits briefly for it)."""
        ...

    async def destroy(self) -> None:
        """Kill everything the sandbox started and release its resources. Idempotent."""
        ...


class Backend(Protocol):
    @property
    def name(self) -> BackendName: ...

    def isolation(self) -> str:
        """One sentence on what this backend isolates (and what it does not)."""
        ...

    async def prepare(self) -> None:
        """Check the backend can run and remove orphans left by a host process that died."""
        ...

    def new_launch(self) -> Launch:
        """Allocate a sandbox id, its directories and the identity it runs as."""
        ...

    async def spawn(self, launch: Launch) -> SandboxInstance:
        """Start the sandbox; its runtime connects to ``launch.channel_dir`` by itself."""
        ...


BackendFactory = Callable[[SandboxConfig, StateDir], Backend]
"""Builds a backend for a :class:`~codemode.sandbox.SandboxManager` instead of choosing one from
the configuration: a test seam (``codemode.testing.in_process_sandbox``), never configurable."""
