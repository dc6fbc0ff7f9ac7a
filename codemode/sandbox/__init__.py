"""Sandboxes that run the model's programs: hardened Docker containers or local processes.

The public surface:

* :class:`SandboxManager` — an async context manager; ``await manager.run(Program(code),
  binding=…, modules=…, handler=…)`` runs one program in a fresh sandbox from the warm pool and
  returns a :class:`RunOutcome`; :meth:`SandboxManager.open_session` keeps one sandbox (and its
  interpreter state) for several runs of one principal.
* :class:`RunUsage` — what a run used of its sandbox (CPU, peak memory, channel bytes, the cap it
  hit), measured by the host, in every :class:`RunOutcome`.
* :class:`Program` — what every run layer takes: the code, its bindings, its wall-time limit, and
  whether a session's run starts from an empty namespace.
* :class:`WorkspaceFiles` / :class:`WorkspaceQuota` / :class:`WorkspaceReturn` — a run's
  workspace going in, the cap each sandbox gives it (``SandboxManager(workspace=…)``), and what
  it held when the program ended (:attr:`RunOutcome.workspace`). Where it is kept is not the
  sandbox's business.
* :func:`run_once` — one program, no pool (``codemode run``).
* :func:`choose_backend` — which backend ``auto`` resolves to here, and why.
* :func:`build_image` / :func:`doctor` — what ``codemode sandbox build`` / ``doctor`` do.
* :data:`BackendFactory` — how the engine and the test doubles name a backend to the manager;
  :class:`InProcessBackend` runs the real runtime in a thread of this process, with no isolation
  at all, for :mod:`codemode.testing` only (never selectable in ``codemode.toml``).

The sandbox knows nothing about MCP: imports go to a :class:`codemode.calls.ModuleProvider` and
calls to a :class:`codemode.calls.CallHandler`, with the run's :class:`codemode.calls.RunBinding`
attached by the host.
"""

from codemode._run_usage import CapHit, RunUsage, UsageSource
from codemode.sandbox._backend import BackendFactory
from codemode.sandbox._doctor import Check, DoctorReport, doctor
from codemode.sandbox._image import BASE_IMAGE_DEFAULT, DEBIAN_BASE_IMAGE, BuildResult, build_image
from codemode.sandbox._inprocess import InProcessBackend
from codemode.sandbox._manager import SandboxManager, Session, run_once
from codemode.sandbox._outcome import (
    BackendName,
    ErrorKind,
    ResultKind,
    RunError,
    RunOutcome,
    WorkspaceReturn,
)
from codemode.sandbox._program import Program, WorkspaceFiles, WorkspaceQuota
from codemode.sandbox._select import BackendInfo, choose_backend

__all__ = [
    "BASE_IMAGE_DEFAULT",
    "DEBIAN_BASE_IMAGE",
    "BackendFactory",
    "BackendInfo",
    "BackendName",
    "BuildResult",
    "CapHit",
    "Check",
    "DoctorReport",
    "ErrorKind",
    "InProcessBackend",
    "Program",
    "ResultKind",
    "RunError",
    "RunOutcome",
    "RunUsage",
    "SandboxManager",
    "Session",
    "UsageSource",
    "WorkspaceFiles",
    "WorkspaceQuota",
    "WorkspaceReturn",
    "build_image",
    "choose_backend",
    "doctor",
    "run_once",
]
