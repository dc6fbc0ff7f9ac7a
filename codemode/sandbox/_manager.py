"""The public entry point: :class:`SandboxManager` runs programs, one fresh sandbox per run."""

from __future__ import annotations

import logging
import secrets
import time
from pathlib import Path
from types import TracebackType
from typing import Self

import anyio
from anyio.abc import TaskGroup

from codemode.calls import CallHandler, ModuleProvider, RunBinding
from codemode.config import SandboxConfig
from codemode.errors import SandboxError
from codemode.sandbox._backend import Backend, BackendFactory
from codemode.sandbox._docker import DockerBackend, new_pool_id
from codemode.sandbox._docker_api import DockerApi
from codemode.sandbox._live import LiveSandbox, start_sandbox
from codemode.sandbox._outcome import RunError, RunOutcome
from codemode.sandbox._pool import WarmPool
from codemode.sandbox._program import Program, WorkspaceQuota
from codemode.sandbox._select import BackendInfo, open_backend
from codemode.sandbox._state import StateDir

__all__ = ["SandboxManager", "Session", "run_once"]

log = logging.getLogger("codemode.sandbox")


class SandboxManager:
    """Runs programs in sandboxes of the configured backend, with a warm pool.

    Use as an async context manager::

        async with SandboxManager(config.sandbox) as sandboxes:
            outcome = await sandboxes.run(Program(code), binding=binding, modules=tree, handler=broker)

    Entering picks the backend (``auto``: Docker when its engine answers and the image exists,
    else the weaker process backend; :attr:`backend` says which and why), removes sandboxes left
    behind by a host process that died, and starts filling the warm pool. Each :meth:`run` takes a
    ready sandbox (or starts one), runs the program, and destroys the sandbox in the background:
    a sandbox never serves two runs, except within one explicit :meth:`open_session` (where a
    ``fresh`` program starts clean, see :attr:`Program.fresh`: a batch worker's). Leaving the
    context destroys every sandbox and waits until they are gone.

    :attr:`pool_id` labels every container this manager starts (``codemode.pool=<id>``): a fresh
    id per manager, or ``$CODEMODE_POOL_ID`` when set, so a caller can find exactly its own
    containers on an engine that others use too.
    """

    def __init__(
        self,
        config: SandboxConfig,
        *,
        state_dir: Path | None = None,
        backend: BackendFactory | None = None,
        workspace: WorkspaceQuota | None = None,
    ) -> None:
        """``backend`` is a test seam: it builds the backend instead of ``config.backend`` choosing
        one (``codemode.testing.in_process_sandbox``). ``workspace``: every sandbox gets a
        workspace of that quota (a run fills it from :attr:`Program.workspace`)."""
        self.config = config
        self._workspace = workspace
        self._state_dir = state_dir
        self._factory = backend
        self._backend: Backend | None = None
        self._info: BackendInfo | None = None
        self._api: DockerApi | None = None
        self._tg: TaskGroup | None = None
        self._pool: WarmPool | None = None
        self._pool_scope: anyio.CancelScope | None = None
        self._sessions: dict[tuple[str, str, str], Session] = {}
        """Open sessions by (principal, tenant, session id): the one registry of them."""
        self._closing = False
        self._tearing_down = 0
        self._torn_down: anyio.Event | None = None
        """Set when the last teardown in progress ends (made by whoever waits for that)."""
        self.pool_id = new_pool_id()

    # -- lifecycle -------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        state = StateDir(self._state_dir, pool_id=self.pool_id)
        self._backend, self._info, self._api = await open_backend(
            self.config, state, factory=self._factory, workspace=self._workspace
        )
        if isinstance(self._backend, DockerBackend):
            self._backend.pool_id = self.pool_id
        log.info("sandbox backend: %s (%s)", self._info.name, self._info.reason)
        tg = anyio.create_task_group()
        await tg.__aenter__()
        self._tg = tg
        backend, config = self._backend, self.config
        self._pool = WarmPool(lambda: start_sandbox(backend, config, tg), config.pool_size, self._discard)
        # Created here, not in the task, so leaving right after entering still stops the refill.
        self._pool_scope = anyio.CancelScope()
        if config.pool_size > 0:
            tg.start_soon(self._run_pool, self._pool, self._pool_scope)
        return self

    @staticmethod
    async def _run_pool(pool: WarmPool, scope: anyio.CancelScope) -> None:
        with scope:
            await pool.run()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        self._closing = True
        tg = self._tg
        if tg is None:
            return None
        with anyio.CancelScope(shield=True):
            if self._pool_scope is not None:
                self._pool_scope.cancel()
            for session in list(self._sessions.values()):
                await session.aclose()
            if self._pool is not None:
                for sandbox in self._pool.take_all():
                    tg.start_soon(sandbox.destroy)
        try:
            # Waits for every background destruction (each one shielded from cancellation).
            return await tg.__aexit__(exc_type, exc, tb)
        finally:
            self._tg = None
            if self._api is not None:
                self._api.close()

    # -- information -----------------------------------------------------------------------

    @property
    def backend(self) -> BackendInfo:
        """Which backend runs programs, why, and what it isolates."""
        if self._info is None:
            raise SandboxError("the SandboxManager has not been entered")
        return self._info

    @property
    def has_workspace(self) -> bool:
        """Whether programs run here get a workspace (a test seam's backend gives none)."""
        return self._workspace is not None and self._factory is None

    @property
    def warm_ready(self) -> int:
        """Warm sandboxes ready to take a run now."""
        return self._pool.ready if self._pool is not None else 0

    async def wait_ready(self, count: int | None = None, *, within_s: float = 60.0) -> None:
        """Wait until the warm pool holds ``count`` ready sandboxes (default: ``pool_size``)."""
        if self._pool is not None:
            await self._pool.wait_ready(count, within_s=within_s)

    @property
    def tearing_down(self) -> int:
        """Sandboxes of finished runs still being destroyed (in the background)."""
        return self._tearing_down

    async def settle(self, *, within_s: float = 60.0) -> None:
        """Wait until the warm pool is full and no sandbox is being torn down: the manager uses
        no CPU of its own until the next run (for benchmarks, which time one thing at a time)."""
        with anyio.fail_after(within_s):
            await self.wait_ready(within_s=within_s)
            while self._tearing_down:
                self._torn_down = anyio.Event()
                await self._torn_down.wait()

    # -- running ---------------------------------------------------------------------------

    def _discard(self, sandbox: LiveSandbox) -> None:
        if self._tg is not None:
            self._tearing_down += 1
            self._tg.start_soon(self._destroy, sandbox)

    async def _destroy(self, sandbox: LiveSandbox) -> None:
        try:
            await sandbox.destroy()
        finally:
            self._tearing_down -= 1
            if not self._tearing_down and self._torn_down is not None:
                self._torn_down.set()

    async def _acquire(self, *, hold: bool = False) -> LiveSandbox:
        if self._tg is None or self._backend is None or self._closing:
            raise SandboxError("the SandboxManager is not running (use it as `async with`)")
        assert self._pool is not None
        sandbox = await self._pool.take_soon(hold=hold)
        if sandbox is not None:
            return sandbox
        return await start_sandbox(self._backend, self.config, self._tg)

    async def run(
        self, program: Program, *, binding: RunBinding, modules: ModuleProvider, handler: CallHandler
    ) -> RunOutcome:
        """Run ``program`` in a fresh sandbox bound to ``binding``.

        Stub imports are served by ``modules``; stub calls go to ``handler`` with ``binding``
        attached by the host. A failure of the program (exception, limit, dead sandbox) is an
        error outcome; :class:`SandboxError` is raised only when no sandbox could be started.
        """
        sandbox = await self._acquire()
        try:
            return await sandbox.execute(program, binding=binding, modules=modules, handler=handler)
        finally:
            self._discard(sandbox)
            if self._pool is not None:
                self._pool.release(sandbox)

    async def open_session(
        self, *, principal: str, tenant: str, session_id: str | None = None, hold_pool_slot: bool = False
    ) -> Session:
        """A sandbox kept for several runs of one principal, with interpreter state carried over.

        Close it with :meth:`Session.aclose` (or use it as ``async with``); leaving the manager
        closes it too. Runs of a session execute one at a time. ``session_id`` names it (unique
        per principal and tenant); by default a random one is chosen. ``hold_pool_slot``: the
        warm pool replaces the session's sandbox only when the session closes (a batch worker's).
        """
        session_id = session_id or "ses_" + secrets.token_hex(8)
        if (principal, tenant, session_id) in self._sessions:
            raise SandboxError(f"a session {session_id!r} is already open for this principal")
        sandbox = await self._acquire(hold=hold_pool_slot)
        session = Session(self, sandbox, principal=principal, tenant=tenant, session_id=session_id)
        self._sessions[session.key] = session
        return session

    def find_session(self, *, principal: str, tenant: str, session_id: str) -> Session | None:
        """The open session of that principal and tenant with that id, if there is one."""
        return self._sessions.get((principal, tenant, session_id))

    @property
    def sessions(self) -> list[Session]:
        """Every open session, of every principal."""
        return list(self._sessions.values())

    def _forget(self, session: Session, sandbox: LiveSandbox) -> None:
        """A session closed: forget it, and let the pool replace its sandbox."""
        if self._sessions.get(session.key) is session:
            del self._sessions[session.key]
        if self._pool is not None:
            self._pool.release(sandbox)


class Session:
    """One sandbox serving consecutive runs of one principal (see :meth:`SandboxManager.open_session`)."""

    def __init__(
        self, manager: SandboxManager, sandbox: LiveSandbox, *, principal: str, tenant: str, session_id: str
    ) -> None:
        self._manager = manager
        self._sandbox = sandbox
        self.principal = principal
        self.tenant = tenant
        self.session_id = session_id
        self.last_used = time.monotonic()
        self._lock = anyio.Lock()
        self._closed = False

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.principal, self.tenant, self.session_id)

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def alive(self) -> bool:
        """False once the session is closed or a run ended its sandbox (timeout, out of memory …)."""
        return not self._closed and self._sandbox.usable

    @property
    def busy(self) -> bool:
        """A run is in progress (or waiting for the one before it): never idle, never evicted."""
        return self._lock.locked()

    async def run(
        self, program: Program, *, binding: RunBinding, modules: ModuleProvider, handler: CallHandler
    ) -> RunOutcome:
        """Run ``program`` in this session's sandbox, after the runs before it (one at a time)."""
        if self._closed:
            raise SandboxError("this sandbox session is closed")
        if (binding.principal, binding.tenant) != (self.principal, self.tenant):
            # A session's interpreter state belongs to one principal; nothing may cross over.
            raise SandboxError(
                "a sandbox session only runs programs of the principal and tenant that opened it"
            )
        async with self._lock:
            try:
                sandbox = self._sandbox
                if not sandbox.usable:
                    return RunOutcome(
                        status="error",
                        run_id=binding.run_id,
                        backend=sandbox.backend,
                        sandbox_id=sandbox.sandbox_id,
                        error=RunError(
                            kind="sandbox",
                            type="SessionEnded",
                            message=f"this session's sandbox is gone ({sandbox.dead_reason or 'closed'}); "
                            "open a new session",
                        ),
                    )
                return await sandbox.execute(program, binding=binding, modules=modules, handler=handler)
            finally:
                self.last_used = time.monotonic()  # idle time counts from a run's end, not its start

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._manager._forget(self, self._sandbox)  # pyright: ignore[reportPrivateUsage]
        await self._sandbox.destroy()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


async def run_once(
    program: Program,
    *,
    config: SandboxConfig,
    binding: RunBinding,
    modules: ModuleProvider,
    handler: CallHandler,
) -> RunOutcome:
    """Run one program without a warm pool (what ``codemode run`` needs): start, run, clean up."""
    async with SandboxManager(config.model_copy(update={"pool_size": 0})) as manager:
        return await manager.run(program, binding=binding, modules=modules, handler=handler)
