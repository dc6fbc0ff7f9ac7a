"""A batch worker on another machine: its own engine, built from what the driver sent it.

What travels (:class:`WorkerSpec`) is the config as a mapping, with its ``${ENV}`` references
unresolved, the lock file's text (the approved pins), the program and the job's options. Secrets
never travel: the worker resolves each reference from its own environment when it connects, and
a missing one stops that worker with a message that names its node.

Before it runs an item, the worker compares its servers' live tool definitions with the
driver's pins. Drift on one node refuses that worker, so no item runs against a tool that
nobody approved. The engine-agnostic part lives here, with no Ray import, so it can be tested
in one process; :mod:`codemode.batch._ray` wraps it in an actor.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from codemode.batch._item import run_item
from codemode.batch._jobs import StoredItem
from codemode.batch._runner import BatchError, BatchOptions, ItemResult
from codemode.config import Config, config_from_mapping
from codemode.errors import CodemodeError
from codemode.host import ConnectionState

if TYPE_CHECKING:
    from codemode.engine import CodeMode

LOCK_NAME = "codemode.lock"


class WorkerRefused(BatchError):
    """A worker cannot run items: its tools drifted from the pins, a secret is missing on its
    node, or a server does not start there. The message names the node."""


@dataclass(frozen=True)
class WorkerSpec:
    """Everything a worker needs, and nothing secret (``${ENV}`` references stay unresolved)."""

    config: dict[str, Any]
    source: str
    base_dir: str
    lock_text: str
    program: str
    job_id: str
    options: BatchOptions

    @classmethod
    def build(cls, config: Config, program: str, job_id: str, options: BatchOptions) -> WorkerSpec:
        try:
            lock_text = config.lock_path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise BatchError(
                f"there is no lock file at {config.lock_path}: run 'codemode sync' and "
                "'codemode pin --approve' first, so that workers know which tools are approved"
            ) from None
        # A worker runs one item at a time: one warm sandbox, one session.
        data = config.model_dump(mode="json")
        data["sandbox"] = {**data["sandbox"], "pool_size": 1}
        return cls(data, config.source, str(config.base_dir), lock_text, program, job_id, options)


def worker_name() -> str:
    return f"{socket.gethostname()} (pid {os.getpid()})"


class RemoteWorker:
    """One worker slot away from the driver: an engine of its own, started on first use."""

    def __init__(self, spec: WorkerSpec, *, where: str | None = None) -> None:
        self.spec = spec
        self.where = where or worker_name()
        self._engine: CodeMode | None = None
        self._session: str | None = None
        self._stack = contextlib.AsyncExitStack()

    async def start(self) -> str:
        """Start the engine and check the pins; returns where this worker runs."""
        if self._engine is None:
            await self._start()
        return self.where

    async def _start(self) -> None:
        from codemode.engine import CodeMode

        spec = self.spec
        workdir, base_dir = await anyio.to_thread.run_sync(self._workdir)
        self._stack.callback(shutil.rmtree, workdir, ignore_errors=True)
        lock = workdir / LOCK_NAME
        data = {**spec.config, "pins": {**spec.config.get("pins", {}), "lock_file": str(lock)}}
        try:
            config = config_from_mapping(data, source=f"{spec.source} on {self.where}", base_dir=base_dir)
            engine = await self._stack.enter_async_context(CodeMode(config))
        except CodemodeError as exc:
            await self.close()
            raise WorkerRefused(f"the worker on {self.where} cannot start: {exc}") from None
        failed = [f"{s.name}: {s.error}" for s in engine.statuses() if s.state is ConnectionState.FAILED]
        if failed:
            await self.close()
            raise WorkerRefused(f"the worker on {self.where} cannot reach its servers: " + "; ".join(failed))
        drift = engine.drift()
        if drift:
            await self.close()
            raise WorkerRefused(
                f"the worker on {self.where} refuses to run items: its live tools differ from the "
                f"driver's pins: {', '.join(drift)}. Make that node run the same servers, or "
                "review the change with 'codemode sync' and 'codemode pin' on the driver"
            )
        options = spec.options
        self._session = await engine.open_session(
            principal=options.principal, tenant=options.tenant, hold_pool_slot=True
        )
        self._engine = engine

    def _workdir(self) -> tuple[Path, Path]:
        """A private directory holding this worker's copy of the lock; and the base directory.

        Relative server paths resolve against the driver's directory where the node has it (a
        shared or identical checkout), else against the private directory.
        """
        workdir = Path(tempfile.mkdtemp(prefix="codemode-worker-"))
        (workdir / LOCK_NAME).write_text(self.spec.lock_text, encoding="utf-8")
        driver_dir = Path(self.spec.base_dir)
        return workdir, driver_dir if driver_dir.is_dir() else workdir

    async def run(self, item: StoredItem, attempt: int) -> ItemResult:
        await self.start()
        assert self._engine is not None
        spec = self.spec
        return await run_item(
            self._engine, spec.program, spec.job_id, item, attempt, spec.options, self._session
        )

    async def close(self) -> None:
        stack, self._stack = self._stack, contextlib.AsyncExitStack()
        self._engine = self._session = None
        await stack.aclose()
