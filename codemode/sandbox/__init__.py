"""Sandboxes that run the model's programs: hardened Docker containers or local processes.

The public surface:

* :class:`SandboxManager` — an async context manager; ``await manager.run(code, binding=…,
  modules=…, handler=…)`` runs one program in a fresh sandbox from the warm pool and returns a
  :class:`RunOutcome`; :meth:`SandboxManager.open_session` keeps one sandbox (and its interpreter
  state) for several runs of one principal.
* :func:`run_once` — one program, no pool (``codemode run``).
* :func:`choose_backend` — which backend ``auto`` resolves to here, and why.
* :func:`build_image` / :func:`doctor` — what ``codemode sandbox build`` / ``doctor`` do.

The sandbox knows nothing about MCP: imports go to a :class:`codemode.calls.ModuleProvider` and
calls to a :class:`codemode.calls.CallHandler`, with the run's :class:`codemode.calls.RunBinding`
attached by the host.
"""

from codemode.sandbox._doctor import Check, DoctorReport, doctor
from codemode.sandbox._image import BASE_IMAGE_DEFAULT, DEBIAN_BASE_IMAGE, BuildResult, build_image
from codemode.sandbox._manager import SandboxManager, Session, run_once
from codemode.sandbox._outcome import BackendName, ErrorKind, ResultKind, RunError, RunOutcome
from codemode.sandbox._select import BackendInfo, choose_backend

__all__ = [
    "BASE_IMAGE_DEFAULT",
    "DEBIAN_BASE_IMAGE",
    "BackendInfo",
    "BackendName",
    "BuildResult",
    "Check",
    "DoctorReport",
    "ErrorKind",
    "ResultKind",
    "RunError",
    "RunOutcome",
    "SandboxManager",
    "Session",
    "build_image",
    "choose_backend",
    "doctor",
    "run_once",
]
