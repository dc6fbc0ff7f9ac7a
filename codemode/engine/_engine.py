"""``CodeMode``: everything wired together - host, pins, stub tree, broker, ledger, sandbox.

This is what ``codemode run``, ``codemode serve`` and the Python API use::

    async with CodeMode.from_file("codemode.toml") as cm:
        result = await cm.run("from servers.crm import get_customer\\nget_customer(customer_id='CUST-0001')")
        print(result.result)

Per run: the host binds the run to a principal and tenant (never the program), the program sees
only the stubs that principal may use, every call passes the broker, and so does the final result.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import secrets
from collections.abc import Mapping, Sequence
from functools import partial
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

import anyio
from pydantic import JsonValue

from codemode._metrics import active as active_metrics
from codemode._tokens import count_tokens
from codemode._tracing import note_run_usage, run_span
from codemode.broker import (
    Approver,
    Broker,
    Elicitor,
    Planner,
    RunLimits,
    Sampler,
    may_see_server,
    reads_visible_to,
    visible_to,
)
from codemode.calls import CallOutcome, ProgressListener, RunBinding, ToolCallRequest, ToolResult
from codemode.catalog import Pins, ServerCatalog
from codemode.config import BackendChoice, CompensationRule, Config, load_config
from codemode.engine._adapters import HostCatalog, LedgerApprovals
from codemode.engine._broker_cpu import BrokerCpu
from codemode.engine._compensate import compensation_key
from codemode.engine._compensation_check import check_compensations, compensations_of
from codemode.engine._down import (
    ImportRecorder,
    ServerDown,
    pin_drift,
    run_output,
    servers_down,
    unavailable_servers,
    waiting_for_review,
)
from codemode.engine._plans import PLAN_TTL_S, Plan, approved_plan, dry_run
from codemode.engine._progress import ProgressCallback, report_progress
from codemode.engine._run_result import RunResult, run_result
from codemode.engine._sessions import EngineSessions, SessionReplica
from codemode.engine._settle import checked, compensation_wanted, settled, undone_if_cancelled
from codemode.engine._skills import ProposingHandler, skill_view
from codemode.engine._tools import ToolFormat, ToolReply, definitions, dispatch
from codemode.engine._workspace import RunWorkspaces, workspace_quota
from codemode.errors import PolicyError, SandboxError
from codemode.host import McpHost, RootsUpdate, ServerStatus, TransportFactory
from codemode.ledger import Clock, Ledger, open_ledger, system_clock
from codemode.sandbox import BackendFactory, Program, RunOutcome, SandboxManager
from codemode.stubs import DetailLevel, SearchResult, VirtualTree, render_tree
from codemode.workspace import WorkspaceStore

if TYPE_CHECKING:
    from codemode.auth import HostAuth

log = logging.getLogger("codemode")


class CodeMode:
    """The engine. Use as an async context manager; see the module docstring."""

    def __init__(
        self,
        config: Config,
        *,
        approver: Approver | None = None,
        auth: HostAuth | None = None,
        backend: BackendChoice | None = None,
        clock: Clock | None = None,
        elicitor: Elicitor | None = None,
        environ: Mapping[str, str] | None = None,
        ledger: Ledger | None = None,
        measure_tokens: bool = False,
        sampler: Sampler | None = None,
        sandbox_backend: BackendFactory | None = None,
        transports: Mapping[str, TransportFactory] | None = None,
    ) -> None:
        if backend is not None:
            config = config.model_copy(
                update={"sandbox": config.sandbox.model_copy(update={"backend": backend})}
            )
            config = config.with_origin(config.source, config.base_dir)
        self.config = config
        self.approver = approver
        self.elicitor = elicitor
        """The person who answers servers' requests for input during tool calls (none: refused)."""
        self.sampler = sampler
        """The model that answers servers' requests for completions (``sampling = "relay"``;
        none: refused)."""
        self._environ = os.environ if environ is None else environ
        self._ledger = ledger
        self._owns_ledger = ledger is None
        self._clock = clock or system_clock
        """Wall time for the ledger it opens, the broker and run expiry; a test seam
        (``codemode.testing.FakeClock``) that moves time without sleeping."""
        self.measure_tokens = measure_tokens
        """Count tokens of every tool result and of the final result (costs some CPU per call)."""
        self._auth = auth
        """The credential store and sign-in for OAuth servers (default: the user's store, no sign-in)."""
        self._transports = transports
        """Per configured server, a transport to use instead of the configured one (tests)."""
        self._sandbox_backend = sandbox_backend
        """A test seam: builds the sandbox backend instead of ``[sandbox] backend`` choosing one
        (``codemode.testing.in_process_sandbox``; not reachable from configuration)."""
        self._host: McpHost | None = None
        self._pins: Pins | None = None
        self._tree: VirtualTree | None = None
        self._broker: Broker | None = None
        self._sandboxes: SandboxManager | None = None
        self._workspaces: RunWorkspaces | None = None
        self._sessions: EngineSessions | None = None
        self._stack: contextlib.AsyncExitStack | None = None

    @classmethod
    def from_file(cls, path: str | os.PathLike[str] | None = None, **options: Any) -> Self:
        return cls(load_config(path), **options)

    # -- lifecycle ---------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        config = self.config
        # One exit stack: whatever started is stopped in reverse order, even if a later part fails
        # to start (a host that cannot start must not leave the ledger open). It is closed without
        # the error, so the caller gets the error itself, not a group of the parts' errors.
        stack = contextlib.AsyncExitStack()
        try:
            if self._ledger is None:
                self._ledger = await anyio.to_thread.run_sync(
                    partial(
                        open_ledger,
                        config.ledger_location(self._environ),
                        store_arguments=config.ledger.store_arguments,
                        clock=self._clock,
                    )
                )
            if self._owns_ledger:
                stack.callback(self._close_ledger)
            self._pins = Pins(config.lock_path)
            host = McpHost(config, environ=self._environ, transports=self._transports, auth=self._auth)
            await stack.enter_async_context(host)
            self._host = host
            for down in servers_down(host.statuses()):
                log.warning("%s", down.notice())  # before any program runs, visible without -v
            host.on_catalog_change(self._catalog_changed)
            self._rebuild_tree()
            self._broker = Broker(
                policy=config.policy,
                catalog=HostCatalog(host, config),
                pins=self._pins,
                backend=host,
                ledger=self._ledger,
                approvals=LedgerApprovals(self._ledger),
                approver=self.approver,
                lease_s=max((s.call_timeout for s in config.servers.values()), default=60.0) + 60.0,
                durable_outcomes=config.ledger.durability == "full",
                count_tokens=count_tokens if self.measure_tokens else None,
                clock=self._clock,
            )
            quota = workspace_quota(config)
            self._sandboxes = await stack.enter_async_context(
                SandboxManager(config.sandbox, state_dir=None, backend=self._sandbox_backend, workspace=quota)
            )
            # Which replica holds each session, in the ledger; every one is released on the way out.
            replica = SessionReplica.of(self._ledger, config.serve)
            self._sessions = EngineSessions(self._sandboxes, config, replica)
            stack.push_async_callback(self._sessions.close_all)
            if self._sandboxes.has_workspace:
                self._workspaces = await RunWorkspaces.start(config, self._ledger)
        except BaseException:
            await stack.aclose()
            raise
        self._stack = stack
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        stack, self._stack = self._stack, None
        if stack is not None:
            await stack.__aexit__(exc_type, exc, tb)

    def _close_ledger(self) -> None:
        if self._ledger is not None:
            self._ledger.close()

    # -- catalog and tree ---------------------------------------------------------------------

    def _rebuild_tree(self) -> None:
        assert self._host is not None
        assert self._pins is not None
        # The pins are current: loaded when entering, re-read by Pins.record on each change and
        # by _current_pins when another process wrote the lock file.
        # The previous tree is reused where servers did not change, and its search index updated.
        self._tree = render_tree(
            self._pins.usable(self._host.catalogs()),
            previous=self._tree,
            semantic=self.config.search.semantic,
        )

    async def _catalog_changed(self, catalog: ServerCatalog) -> None:
        """A server re-listed (list_changed): record drift in the lock and re-render the stubs."""
        assert self._pins is not None
        diff = await anyio.to_thread.run_sync(self._pins.record, catalog)
        if diff.changed or diff.added or diff.removed:
            log.warning(
                "server %s changed its tools while running: added %s, changed %s, removed %s "
                "(changed and new tools are blocked until approved)",
                catalog.server,
                diff.added,
                diff.changed,
                diff.removed,
            )
        self._rebuild_tree()

    @property
    def workspaces(self) -> WorkspaceStore | None:
        """Where runs' workspaces are kept; None when runs get none (disabled, a test backend)."""
        return None if self._workspaces is None else self._workspaces.store

    def _require(self) -> tuple[McpHost, Broker, SandboxManager, VirtualTree]:
        if self._host is None or self._broker is None or self._sandboxes is None or self._tree is None:
            raise SandboxError("CodeMode is not running; use it as `async with CodeMode(...)`")
        return self._host, self._broker, self._sandboxes, self._tree

    def _current_pins(self) -> Pins:
        """The pins as the lock file has them now. Another process may have approved some
        meanwhile (`codemode pin --approve` beside a running serve): one stat tells, and the
        stubs are re-rendered only when it did."""
        assert self._pins is not None
        if self._pins.reload_if_changed():
            self._rebuild_tree()
        return self._pins

    def statuses(self) -> list[ServerStatus]:
        host, *_ = self._require()
        return host.statuses()

    def servers_down(self) -> list[ServerDown]:
        """The configured servers that cannot be used now (down or reconnecting), each with why."""
        return servers_down(self.statuses())

    async def update_roots(self, server: str, roots: Sequence[str]) -> RootsUpdate:
        """Offer ``roots`` to ``server`` from now on, telling it where the protocol allows (see
        :meth:`McpHost.update_roots`). ``codemode serve`` calls it when the config's roots change."""
        return await self._require()[0].update_roots(server, roots)

    def drift(self) -> list[str]:
        """Tools whose live definition differs from its approved pin, or that the server no
        longer lists (``server/tool (changed)``); empty when every pinned tool is as approved."""
        return pin_drift(self._require()[0].catalogs(), self._current_pins())

    def _unavailable_servers(self, principal: str) -> dict[str, str]:
        policy, host = self.config.policy, self._require()[0]
        seen = partial(may_see_server, policy, principal)
        return unavailable_servers(
            self.statuses(), seen, waiting_for_review(host.catalogs(), self._current_pins())
        )

    @property
    def backend(self) -> str:
        return self._require()[2].backend.name

    @property
    def ledger(self) -> Ledger:
        """The ledger every run and call of this engine is recorded in."""
        if self._ledger is None:
            raise SandboxError("CodeMode is not running; use it as `async with CodeMode(...)`")
        return self._ledger

    def compensation_rules(self) -> Mapping[str, CompensationRule]:
        """How each tool's calls are undone: ``[compensation]`` over trusted servers' declarations."""
        return compensations_of(self.config, self._require()[0].catalogs(), self._current_pins()).rules

    def check_compensations(self) -> None:
        """Refuse compensation rules that cannot work (a ``ConfigError`` naming each key)."""
        check_compensations(self.config, self._require()[0].catalogs(), self._current_pins())

    @property
    def warm_sandboxes(self) -> int:
        """Warm sandboxes ready to take a run now (0 when the engine is not running)."""
        return self._sandboxes.warm_ready if self._sandboxes is not None else 0

    def tree_for(self, principal: str | None = None) -> VirtualTree:
        """The stub tree as ``principal`` may see it (default: the configured default principal)."""
        who = principal or self.config.policy.default_principal
        tree = self.approved_tree()
        return tree.restrict(visible_to(self.config.policy, who), reads_visible_to(self.config.policy, who))

    @property
    def tree(self) -> VirtualTree:
        return self.tree_for()

    def approved_tree(self) -> VirtualTree:
        """Every approved tool's stubs, whoever may see them: what saved skills are judged against."""
        self._require()  # not running: say so
        self._current_pins()  # may re-render the tree
        return self._require()[3]

    async def tree_with_skills(self, principal: str | None = None, tenant: str | None = None) -> VirtualTree:
        """:meth:`tree_for` plus ``skills/``: the tenant's current skills the principal may use."""
        try:
            who, where = self.config.policy.identity(principal, tenant)
        except PolicyError:  # an unknown principal sees what tree_for shows it, and no skill
            return self.tree_for(principal)
        view = self.tree_for(who)
        return await skill_view(view, self.approved_tree(), self._ledger, self.config.policy, who, where)

    def search(
        self, query: str, *, k: int = 5, detail: DetailLevel = "summary", principal: str | None = None
    ) -> list[SearchResult]:
        return self.tree_for(principal).search(query, k=k, detail=detail)

    # -- the model-facing tools --------------------------------------------------------------

    def server_index(self, principal: str | None = None) -> dict[str, int]:
        """Visible tool count per server, for the ``run_code`` description."""
        counts: dict[str, int] = {}
        for spec in self.tree_for(principal).tools():
            counts[spec.server] = counts.get(spec.server, 0) + 1
        return counts

    def tool_definition(
        self, format: ToolFormat = "openai", *, principal: str | None = None
    ) -> dict[str, Any]:
        """The single ``run_code`` tool, in the shape the given model API expects."""
        return definitions(format, servers=self.server_index(principal), navigation=False)[0]

    def tool_definitions(
        self, format: ToolFormat = "openai", *, principal: str | None = None
    ) -> list[dict[str, Any]]:
        """``run_code`` plus ``search_tools``, ``list_files`` and ``read_file``."""
        return definitions(format, servers=self.server_index(principal))

    async def handle_tool_call(
        self,
        name: str,
        arguments: Mapping[str, Any] | str | None,
        *,
        principal: str | None = None,
        tenant: str | None = None,
    ) -> ToolReply:
        """Execute a model's call of one of :meth:`tool_definitions` (arguments as dict or JSON)."""
        return await dispatch(self, name, arguments, principal=principal, tenant=tenant)

    # -- runs --------------------------------------------------------------------------------

    def _bind(
        self,
        principal: str | None,
        tenant: str | None,
        session_id: str | None,
        idempotency_scope: str | None = None,
        read_only: bool = False,
        trace_id: str | None = None,
    ) -> RunBinding:
        policy = self.config.policy
        who, where = policy.identity(principal, tenant)
        return RunBinding(
            run_id="run_" + secrets.token_hex(8),
            principal=who,
            tenant=where,
            trace_id=trace_id or secrets.token_hex(16),
            session_id=session_id,
            expires_at=self._clock().timestamp() + policy.budget.wall_time_s + 60,
            idempotency_scope=idempotency_scope,
            read_only=read_only,
        )

    async def run(
        self,
        code: str,
        *,
        principal: str | None = None,
        tenant: str | None = None,
        session_id: str | None = None,
        wall_time_s: float | None = None,
        approver: Approver | None = None,
        elicitor: Elicitor | None = None,
        sampler: Sampler | None = None,
        progress: ProgressCallback | None = None,
        progress_interval_s: float = 1.0,
        on_call_progress: ProgressListener | None = None,
        inputs: JsonValue = None,
        bindings: Mapping[str, JsonValue] | None = None,
        fresh_namespace: bool = False,
        idempotency_scope: str | None = None,
        read_only: bool = False,
        limits: RunLimits | None = None,
        traceparent: str | None = None,
        planner: Planner | None = None,
        plan_id: str | None = None,
        verify: str | None = None,
        compensate: bool | None = None,
    ) -> RunResult:
        """Run one program and return its filtered final result.

        ``session_id`` keeps interpreter state across runs of the same principal and tenant: the
        first run with a new id opens a sandbox session, later runs reuse it (until it idles out;
        see ``[serve] session_idle_s`` and ``max_sessions``). Another principal using the same id
        gets a different session. Without it every run gets a fresh sandbox.

        ``approver`` answers this run's approval requests (default: the engine's approver),
        ``elicitor`` its servers' requests for input (default: the engine's elicitor) and
        ``sampler`` their requests for model completions (default: the engine's sampler).
        ``progress(calls_so_far, elapsed_s)`` is called every ``progress_interval_s`` while it runs;
        ``on_call_progress`` hears what its calls in flight report (a long-running task's status
        and progress).
        ``inputs`` is bound to the name ``INPUT`` in the program (a batch item), and ``bindings``
        to their names; ``fresh_namespace`` starts a session run from an empty namespace. With
        ``idempotency_scope``, side-effecting calls get derived idempotency keys (see
        :class:`~codemode.calls.RunBinding`). ``read_only`` refuses every call not known to be
        read-only; ``limits`` tightens the policy's per-run budgets. ``traceparent`` (W3C) makes
        the run's span a child of the caller's trace. ``planner`` makes it a dry run (see :meth:`plan`);
        ``plan_id`` follows an approved plan (its calls need no other approval).

        ``verify``: a read-only check program run on its final value (``RESULT``) that must return
        True, or the run is ``unverified``. ``compensate`` (default: ``[policy] compensate``) undoes
        a failed or unverified run's side effects; with either, the result has the ``outcome``.
        """
        _, broker, sandboxes, _ = self._require()
        compensate = compensation_wanted(self, compensate)  # a rule that cannot work is refused now
        who, now = self.config.policy.identity(principal, tenant), self._clock()
        plan = None if plan_id is None else await approved_plan(self._ledger, plan_id, code, who, now)

        def bind(trace_id: str) -> RunBinding:
            return self._bind(principal, tenant, session_id, idempotency_scope, read_only, trace_id)

        with run_span(bind, traceparent=traceparent) as (span, binding):
            names = dict(bindings or {})
            if inputs is not None:
                names["INPUT"] = inputs
            scope = broker.run(
                binding,
                hashlib.sha256(code.encode()).hexdigest(),
                approver=approver,
                limits=limits,
                elicitor=elicitor or self.elicitor,
                sampler=sampler or self.sampler,
                on_call_progress=on_call_progress,
                planner=planner,
                approved_plan=plan,
            )
            async with undone_if_cancelled(self, binding.run_id, compensate, approver), scope:
                modules = ImportRecorder(await self.tree_with_skills(binding.principal, binding.tenant))
                broker_cpu = BrokerCpu(broker)
                outcome: RunOutcome | None = None
                written: tuple[str, ...] = ()
                # Outside the task group: a workspace that cannot load is a plain WorkspaceError.
                workspaces = self._workspaces
                files = None if workspaces is None else await workspaces.files_for(binding, session_id)
                # So too a session another replica holds (in the shared ledger): SandboxError naming it.
                sessions = self._require_sessions()
                session = (
                    None if session_id is None else await sessions.get(binding, session_id, run_s=wall_time_s)
                )
                async with anyio.create_task_group() as tg:
                    if progress is not None:
                        tg.start_soon(report_progress, progress, scope.state, progress_interval_s)
                    # ``fresh`` changes nothing in a new sandbox: its namespace is empty anyway.
                    program = Program(
                        code, bindings=names, wall_time_s=wall_time_s, fresh=fresh_namespace, workspace=files
                    )
                    run_in = sandboxes.run if session is None else session.run
                    handler = ProposingHandler(broker_cpu, self._ledger, self.tree_for)
                    outcome = await run_in(program, binding=binding, modules=modules, handler=handler)
                    if workspaces is not None and files is not None:
                        outcome, written = await workspaces.keep(files, binding, session_id, outcome)
                    tg.cancel_scope.cancel()
                assert outcome is not None
                output = run_output(
                    outcome, modules.missed, lambda: self._unavailable_servers(binding.principal)
                )
                with broker_cpu.step():
                    end = scope.finish(outcome.status, output)
                usage = outcome.usage
                scope.note(
                    duration_ms=outcome.duration_ms,
                    usage=None if usage is None else usage.model_dump(mode="json"),
                    broker_cpu_s=round(broker_cpu.seconds, 6),
                )
                result = run_result(
                    binding,
                    outcome,
                    end,
                    count_tokens=count_tokens if self.measure_tokens else None,
                    broker_cpu_s=broker_cpu.seconds,
                )
                if written:
                    result = result.model_copy(update={"workspace_written": written})
                if verify is not None:  # in the run's scope: its verdict is in the run's record
                    result = await checked(
                        partial(self.run, principal=principal, tenant=tenant), result, verify, scope
                    )
            if verify is not None or compensate:
                result = await settled(self, result, compensate=compensate, approver=approver)
            span.set_attribute("codemode.status", result.status)
            note_run_usage(span, result.usage, result.broker_cpu_s)
            metrics = active_metrics()
            if metrics is not None:
                metrics.runs.labels(result.status).inc()
                metrics.run_finished(result.backend, result.usage, result.broker_cpu_s)
            return result

    async def plan(self, code: str, *, ttl_s: float = PLAN_TTL_S, **options: Any) -> Plan:
        """Dry-run ``code``: its reads are sent, every other call is planned (not sent) and gets a
        placeholder. The plan is stored in the ledger and returned; ``options`` are :meth:`run`'s."""
        return await dry_run(
            self.run, self._ledger, new_plan_at=self._clock(), code=code, ttl_s=ttl_s, **options
        )

    async def call_tool(
        self,
        server: str,
        tool: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        purpose: str,
        principal: str | None = None,
        tenant: str | None = None,
        approver: Approver | None = None,
        compensates: str | None = None,
    ) -> CallOutcome:
        """One tool call made by codemode itself (reconcile's read-back, benchmarks), not a program.

        It is a run of its own with one call: bound to a principal and tenant, through every gate
        (a tool the policy denies is refused, a risky one needs consent), recorded in the ledger,
        and its result filtered. ``purpose`` says why, in the run's record. ``compensates``: the
        call undoes that call, is recorded against it, and holds a key derived from it.
        """
        _, broker, _, _ = self._require()
        binding = self._bind(principal, tenant, None).model_copy(update={"compensates": compensates})
        key = None if compensates is None else compensation_key(compensates)
        entry = self._current_pins().lock.entry(server, tool)
        schema_hash = entry.approved.hash if entry is not None and entry.approved is not None else ""
        digest = hashlib.sha256(f"codemode:{purpose}:{server}/{tool}".encode()).hexdigest()
        async with broker.run(binding, digest, approver=approver, record={"purpose": purpose}) as scope:
            request = ToolCallRequest(
                seq=1, server=server, tool=tool, schema_hash=schema_hash, arguments=dict(arguments or {})
            ).model_copy(update={"idempotency_key": key})
            outcome = await broker.call_tool(binding, request)
            # The outcome passed the call's own filter: no other output leaves this run.
            scope.finish("ok" if isinstance(outcome, ToolResult) else "error")
        return outcome

    # -- sessions ----------------------------------------------------------------------------

    async def open_session(
        self, *, principal: str | None = None, tenant: str | None = None, hold_pool_slot: bool = False
    ) -> str:
        """Open a session for a principal and return its id (a later ``run(session_id=…)`` uses it).
        ``hold_pool_slot``: the warm pool replaces its sandbox only when it closes (for a session
        busy for a long time, such as a batch worker's)."""
        binding = self._bind(principal, tenant, None)
        session_id = "ses_" + secrets.token_hex(8)
        await self._require_sessions().get(binding, session_id, hold_pool_slot=hold_pool_slot)
        return session_id

    def _require_sessions(self) -> EngineSessions:
        self._require()
        assert self._sessions is not None
        return self._sessions

    async def expire_idle_sessions(self) -> int:
        """Close sessions unused for ``[serve] session_idle_s``; return how many were closed."""
        return 0 if self._sessions is None else await self._sessions.expire_idle()

    async def close_session(
        self, session_id: str, *, principal: str | None = None, tenant: str | None = None
    ) -> None:
        """Close the session, releasing it in the ledger for any replica to open again."""
        await self._require_sessions().close(self._bind(principal, tenant, None), session_id)
