"""The broker: every call from the sandbox passes the gates, the ledger and the result filter.

Per call, in order: PII placeholders mapped back → principal → tool identity → arguments →
resource scope → budget (check) → quota (check) → consent (asking a person if needed) → quota
and budget (commit) → side effects (reserve in the ledger: idempotency, conflict, one in-flight
call per key) → the MCP call (under the run's concurrency cap) → record the outcome → result
filter → back to the program. Gates return decisions carrying facts (:mod:`codemode.broker._facts`);
the broker folds them, so the order is written once, in :meth:`Broker.call_tool`.

The broker knows nothing about Docker; the sandbox knows nothing about MCP. A denial is a
value (``CallDenied``) that the runtime raises as a typed exception inside the program; the run
goes on. Identity, tenant and approvals come only from the :class:`RunBinding` the host made.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from typing import Any, Unpack

import anyio
import mcp_types
from pydantic import BaseModel

from codemode._metrics import active as active_metrics
from codemode._redaction import redact_secrets
from codemode._tracing import call_span, finish_call, note_intent
from codemode.broker._approvals import Approver
from codemode.broker._backend import ToolBackend
from codemode.broker._call_inputs import Record as RecordInput
from codemode.broker._decisions import Allow, Deny, Gate, NeedsApproval
from codemode.broker._derived_keys import with_derived_key
from codemode.broker._dry_run import plan_match, plan_or_note_read, record_plan_approval
from codemode.broker._facts import Call, CallKind, Facts
from codemode.broker._outcomes import Outcomes
from codemode.broker._pii import arguments_for_tool
from codemode.broker._planning import references
from codemode.broker._run import RunLimits, RunOptions, RunScope, RunState, RunSummary
from codemode.broker._send import SentCall, ask_server
from codemode.broker.gates import (
    ApprovalFlow,
    ArgumentGate,
    BudgetGate,
    CatalogView,
    ConsentGate,
    PrincipalGate,
    QuotaGate,
    ReadOnlyRunGate,
    RunQuotas,
    ScopeGate,
    ServerGate,
    ToolGate,
)
from codemode.broker.gates._consent import ApprovalStore
from codemode.broker.gates._tool import LockView, PinRecheck
from codemode.calls import (
    CallDenied,
    CallFailed,
    CallOutcome,
    PromptGetRequest,
    ResourceReadRequest,
    RunBinding,
    ToolCallRequest,
    ToolError,
    ToolResult,
)
from codemode.config import PolicyConfig
from codemode.errors import (
    CodemodeError,
    OutcomeUnknownError,
    ServerRefusedError,
    ServerRejectedError,
    ServerUnavailableError,
)
from codemode.ledger import (
    CallIntent,
    Clock,
    Completion,
    Conflict,
    Fresh,
    InFlight,
    Ledger,
    ReadRecord,
    Replay,
    StoreError,
    Unresolved,
    arguments_digest,
    reserve_waiting,
    system_clock,
)

log = logging.getLogger("codemode.broker")

REFUSED_RETRIES = 3
"""Attempts after a refusal-before-execution (429/503) before giving up."""

IN_FLIGHT_WAIT_S = 120.0
LEASE_MARGIN_S = 60.0
"""How much longer than a long-running call's time limit its lease is held."""

DENIALS_RECORDED_PER_KIND = 100
DENIALS_RECORDED_PER_RUN = 1_000
"""A program that loops on denied calls must not turn each one into a ledger write (an fsync, a
hash-chained event): past these caps a run's denials of one gate and tool - or all of them -
are only counted, and the count is reported in the run's summary and flags."""


class Broker:
    """Implements :class:`codemode.calls.CallHandler` for every run it has opened."""

    def __init__(
        self,
        *,
        policy: PolicyConfig,
        catalog: CatalogView,
        pins: LockView,
        backend: ToolBackend,
        ledger: Ledger,
        approvals: ApprovalStore,
        approver: Approver | None = None,
        lease_s: float = 600.0,
        count_tokens: Callable[[str], int] | None = None,
        durable_outcomes: bool = True,
        clock: Clock = system_clock,
    ) -> None:
        self.policy = policy
        self.catalog = catalog
        self.pins = pins
        self.backend = backend
        self.ledger = ledger
        self.lease_s = lease_s
        """How long a sent call may stay unanswered before its lease lapses into ``unknown``."""
        self.durable_outcomes = durable_outcomes
        """Whether a write's outcome is recorded and flushed to disk before the program gets it
        (``[ledger] durability``); else it is queued. Its record before the request always is."""
        self.outcomes = Outcomes(policy.results, count_tokens)
        """What each answer becomes for the ledger and for the run (filters, budgets, tokens)."""
        self.clock = clock
        """Wall time for run expiry, approval expiry and the run's wall-time budget (tests move it)."""
        self.consent = ConsentGate(policy, approvals, clock)
        self._pinned = pinned = ToolGate(policy, catalog, pins)
        self.approvals = ApprovalFlow(policy, approvals, approver, recheck=PinRecheck(pinned), clock=clock)
        self.budget = BudgetGate(policy)
        self._ledger_lane = anyio.CapacityLimiter(1)
        """The ledger serialises its operations anyway (one connection, one lock): queue them here,
        in async code, instead of parking a worker thread per concurrent call on that lock."""
        quotas = policy.quotas.configured  # runs are counted where they start, calls by a gate
        self.run_quotas = RunQuotas(policy.quotas, ledger.quotas) if quotas else None
        self.quota = QuotaGate(policy.quotas, ledger.quotas, self._ledger_lane) if quotas else None
        principal = PrincipalGate(policy)
        # Identity and what is being asked first; then cost, so that nobody is asked to approve a
        # call the budget would refuse anyway; consent last. The budget is taken only after consent.
        self._tool_gates: tuple[Gate, ...] = (
            principal,
            pinned,
            ReadOnlyRunGate(),
            ArgumentGate(policy),
            ScopeGate(),
            self.budget,
            *([] if self.quota is None else [self.quota]),
        )
        self._read_gates: tuple[Gate, ...] = (principal, ServerGate(policy), self.budget)
        self._planned_gates = tuple(g for g in self._tool_gates if not isinstance(g, ArgumentGate))
        """A dry run's gates for a call holding a planned result, which no schema can check yet."""
        self._runs: dict[str, RunState] = {}

    # -- runs --------------------------------------------------------------------------------

    def run(
        self,
        binding: RunBinding,
        code_digest: str,
        *,
        record: Mapping[str, Any] | None = None,
        **options: Unpack[RunOptions],
    ) -> RunScope:
        """A run's life, the way every entry point has one: ``async with broker.run(...) as
        scope`` begins and opens it, ``scope.finish(status, output)`` filters what leaves it and
        closes it, leaving records its end (see :class:`RunScope`). ``record`` adds fields to the
        run's ledger record (why codemode itself made the run)."""
        return RunScope(
            binding,
            code_digest,
            ledger=self.ledger,
            results=self.policy.results,
            open_run=partial(self.open_run, binding, **options),
            close_run=self.close_run,
            record=record,
            **({} if self.run_quotas is None else self.run_quotas.steps(binding, code_digest)),
        )

    def open_run(self, binding: RunBinding, **options: Unpack[RunOptions]) -> RunState:
        """Start taking a run's calls, with no record of the run in the ledger: a step of
        :meth:`run`, and for test doubles (``codemode.testing.open_test_run``)."""
        state = RunState(
            binding=binding,
            # A free slot is taken without yielding: the call yields soon enough, on its request.
            concurrency=anyio.Semaphore(self.policy.budget.concurrent_calls, fast_acquire=True),
            approver=options.get("approver"),
            elicitor=options.get("elicitor"),
            sampler=options.get("sampler"),
            on_call_progress=options.get("on_call_progress"),
            limits=options.get("limits") or RunLimits(),
            clock=self.clock,
            planner=options.get("planner"),
            approved_plan=options.get("approved_plan"),
        )
        self._runs[binding.run_id] = state
        return state

    def close_run(self, run_id: str) -> RunSummary:
        """Stop taking the run's calls; its counts."""
        return self._runs.pop(run_id).summary()

    # -- tools -------------------------------------------------------------------------------

    def _state(self, binding: RunBinding) -> RunState | None:
        state = self._runs.get(binding.run_id)
        # The binding object comes from the host; a mismatch means a confused caller. Fail closed.
        if state is None or state.binding != binding:
            return None
        return state

    async def call_tool(self, binding: RunBinding, request: ToolCallRequest) -> CallOutcome:
        started = time.perf_counter()
        with call_span(binding, request) as span:
            try:
                outcome = await self._call_tool(binding, request)
            except Exception:  # a bug; the request may have left, so a batch item is not retried blindly
                log.exception("handling a tool call raised instead of returning an outcome")
                outcome = CallFailed(reason="the host failed while handling the call", outcome_unknown=True)
                if (run := self._state(binding)) is not None:
                    with run.lock:
                        run.unknown_outcomes += 1
            outcome = self._reason_filtered(binding, outcome)
            finish_call(span, outcome)
        metrics = active_metrics()
        if metrics is not None:
            metrics.call_finished(outcome, time.perf_counter() - started)
        return outcome

    def _reason_filtered(self, binding: RunBinding, outcome: CallOutcome) -> CallOutcome:
        run = self._state(binding)
        if run is not None and isinstance(outcome, CallFailed | ToolError):
            with run.lock:
                run.failed_calls += 1
        return self.outcomes.reason_for_run(outcome, None if run is None else run.vault)

    async def _call_tool(self, binding: RunBinding, request: ToolCallRequest) -> CallOutcome:
        run = self._state(binding)
        if run is None:
            return CallDenied(gate="principal", reason="no open run is bound to this call")
        call = Call(
            binding=binding,
            run=run,
            server=request.server,
            name=request.tool,
            arguments=arguments_for_tool(self.policy.results, run.vault, request),
            now=self.clock().timestamp(),
            request=request,
        )
        planner, gates = run.planner, self._tool_gates
        if planner is not None and references(dict(call.arguments)):
            gates = self._planned_gates
        decision = await self._decide(call, gates, Facts())
        if isinstance(decision, Deny):
            return await self._deny(call, decision)
        facts = decision.facts
        if planner is not None:
            checked = gates is self._tool_gates
            planned = plan_or_note_read(planner, call, facts, gates, self.consent, checked=checked)
            if planned is not None:
                return planned
        call = with_derived_key(call, facts)
        keyed = call.request is not None and call.request.idempotency_key is not None
        # An operation that already ran under this idempotency key is replayed, not re-approved.
        replay = keyed and await anyio.to_thread.run_sync(
            partial(self.ledger.would_replay, self._intent(call, facts)), limiter=self._ledger_lane
        )
        planned = None if replay else plan_match(run.approved_plan, call, facts)
        if planned is not None:
            approval_id = await record_plan_approval(self.consent.store, call, facts, planned)
            facts = facts.with_(approval_id=approval_id)
        elif not replay:
            consent = await self.consent.check(call, facts)
            if isinstance(consent, NeedsApproval):
                consent = await self.approvals.obtain(call, consent)
            if isinstance(consent, Deny):
                return await self._deny(call, consent, facts)
            facts = consent.facts
        # The shared quota first: a budget refusal then over-counts it by a call, never under.
        taken = None if self.quota is None else await self.quota.commit(call, facts)
        taken = taken or self.budget.commit(call, facts)
        if taken is not None:
            return await self._deny(call, taken, facts)
        outcome = await self._execute(call, facts)
        if planned is not None and run.approved_plan is not None:
            run.approved_plan.completed(planned, outcome)
        return outcome

    @staticmethod
    async def _decide(call: Call, gates: tuple[Gate, ...], facts: Facts) -> Allow | Deny:
        """Run ``gates`` in order, each on the facts the previous ones established."""
        for gate in gates:
            decision = await gate.check(call, facts)
            if isinstance(decision, Deny):
                return decision
            if isinstance(decision, NeedsApproval):
                return Deny(gate.name, f"{decision.why} (this gate cannot ask for approval here)")
            facts = decision.facts
        return Allow(facts)

    async def _deny(self, call: Call, decision: Deny, facts: Facts | None = None) -> CallDenied:
        gate = decision.gate
        reason = redact_secrets(decision.reason)[0]  # reasons may quote argument values
        run = call.run
        kind = f"{gate}:{call.label}"
        recordable = call.kind == "tool"  # resources and prompts leave no call record
        with run.lock:
            run.denials += 1
            run.denied[kind] += 1
            record = recordable and (
                run.denials_recorded[kind] < DENIALS_RECORDED_PER_KIND
                and run.denials_recorded.total() < DENIALS_RECORDED_PER_RUN
            )
            if record:
                run.denials_recorded[kind] += 1
            elif recordable:
                run.denials_unrecorded[kind] += 1
        if record:
            intent = self._intent(call, facts or Facts())
            await anyio.to_thread.run_sync(
                lambda: self.ledger.mark_denied(intent, gate=gate, reason=reason),
                limiter=self._ledger_lane,
            )
        log.info("denied %s (%s): %s", call.call_id, gate, reason)
        return CallDenied(gate=gate, reason=reason)

    def _intent(self, call: Call, facts: Facts) -> CallIntent:
        request = call.request
        assert request is not None, "only tool calls are recorded"
        return CallIntent(
            call_id=call.call_id,
            run_id=call.binding.run_id,
            trace_id=call.binding.trace_id,
            principal=call.binding.principal,
            tenant=call.binding.tenant,
            server=call.server,
            tool=call.name,
            tool_version=self.catalog.server_version(call.server),
            schema_hash=request.schema_hash,
            arguments=dict(call.arguments),
            idempotency_key=request.idempotency_key,
            resource_scope=";".join(facts.scope) or None,
            approval_id=facts.approval_id,
            skill=request.skill,
            compensates=call.binding.compensates,
        )

    async def _execute(self, call: Call, facts: Facts) -> CallOutcome:
        intent = self._intent(call, facts)
        note_intent(intent, partial(arguments_digest, intent.arguments))
        read = self._is_read(call, facts)
        for attempt in range(1, REFUSED_RETRIES + 1):
            sent = await (self._send_read(call, intent) if read else self._send_write(call, intent))
            if not isinstance(sent, ServerRefusedError):
                return sent
            # Refused before execution (429/503, or the tool's schema changed on the server):
            # nothing happened, so a bounded, backed-off retry is safe. The ledger freed the key.
            if attempt == REFUSED_RETRIES or "definition of the tool changed" in sent.reason:
                return CallFailed(reason=f"{sent} (not executed; gave up after {attempt} attempt(s))")
            await anyio.sleep(
                min(sent.retry_after if sent.retry_after is not None else 0.2 * 2 ** (attempt - 1), 5.0)
            )
        raise AssertionError("unreachable")

    @staticmethod
    def _is_read(call: Call, facts: Facts) -> bool:
        """Whether the call is recorded after the fact instead of before it is sent: read-only by
        the policy or a trusted server (risk ``low``) and without an idempotency key. Sending it
        twice is harmless, so a record lost in a crash loses nothing to reconcile."""
        return facts.risk == "low" and (call.request is None or call.request.idempotency_key is None)

    def _task_time_limit(self, call: Call) -> float | None:
        """A long-running (task) call may go on until the run's wall-time budget is spent; other
        calls keep their server's ``call_timeout`` (None)."""
        if not self.backend.long_running(call.server, call.name):
            return None
        return max(1.0, self.policy.budget.wall_time_s - call.run.elapsed())

    async def _ask_server(
        self, call: Call, call_id: str, record_input: RecordInput, time_limit_s: float | None
    ) -> mcp_types.CallToolResult:
        return await ask_server(
            self.backend, self._pinned, self.policy, call, SentCall(call_id, record_input, time_limit_s)
        )

    async def _send_write(self, call: Call, intent: CallIntent) -> CallOutcome | ServerRefusedError:
        """Record the call, send it, record what happened. Returns the refusal to retry on."""
        # Reserve and mark sent in one transaction: the record exists before the request leaves.
        reservation = await reserve_waiting(
            self.ledger,
            intent,
            wait_s=IN_FLIGHT_WAIT_S,
            lease_s=self.lease_s,
            send=True,
            limiter=self._ledger_lane,
        )
        if isinstance(reservation, Replay):
            # The stored outcome has secrets redacted but PII in clear: tokenise it for this run.
            return self.outcomes.for_run(call, reservation.outcome)
        if isinstance(reservation, Conflict | Unresolved):
            with call.run.lock:
                call.run.denials += 1
                if isinstance(reservation, Unresolved):
                    call.run.unknown_outcomes += 1
            return CallDenied(gate="side_effects", reason=reservation.reason)
        if isinstance(reservation, InFlight):
            return CallFailed(
                reason="another call with this idempotency key is still running "
                f"({reservation.call_id}); nothing was sent"
            )
        assert isinstance(reservation, Fresh)
        call_id = reservation.call_id
        run = call.run
        ledger = self.ledger
        limit = self._task_time_limit(call)
        if limit is not None and limit + LEASE_MARGIN_S > self.lease_s:
            # The answer may come after the lease would lapse (recovery would then call it
            # unknown): hold the lease for the whole wait.
            await self._record(call_id, partial(ledger.extend_lease, call_id, limit + LEASE_MARGIN_S))
        try:
            result = await self._ask_server(call, call_id, partial(self._record_input, call_id), limit)
        except ServerRefusedError as exc:
            await self._record(
                call_id, partial(ledger.mark_refused, call_id, exc.reason, retry_after_s=exc.retry_after)
            )
            return exc
        except ServerUnavailableError as exc:
            await self._record(call_id, partial(ledger.mark_refused, call_id, exc.reason))
            return CallFailed(reason=exc.summary)
        except ServerRejectedError as exc:
            failure = CallFailed(reason=str(exc))
            await self._record(call_id, partial(ledger.complete, call_id, failure))
            return failure
        except OutcomeUnknownError as exc:
            await self._record(call_id, partial(ledger.mark_unknown, call_id, exc.reason))
            with run.lock:
                run.unknown_outcomes += 1
            return CallFailed(
                reason=f"{exc}. It is recorded as 'unknown' and will not be retried; "
                "see 'codemode ledger reconcile'",
                outcome_unknown=True,
            )
        except anyio.get_cancelled_exc_class():
            # The run was cancelled while the request was out: it may still execute.
            await self._record(
                call_id, partial(ledger.mark_unknown, call_id, "the run was cancelled during the call")
            )
            raise
        except Exception as exc:  # a bug must not lose the record: the request may have left
            await self._record(call_id, partial(ledger.mark_unknown, call_id, repr(exc)))
            with run.lock:
                run.unknown_outcomes += 1
            return CallFailed(reason=f"internal error: {exc!r}", outcome_unknown=True)
        stored: ToolResult | ToolError = ToolError(message="the result filter failed")
        receipt: str | None = None
        filtered: dict[str, int | bool] | None = None
        try:
            outcome, stored, receipt, filtered = self.outcomes.fresh(call, result)
            return outcome
        finally:
            if self.durable_outcomes:
                complete = partial(ledger.complete, call_id, stored, receipt=receipt, filtered=filtered)
                await self._record(call_id, complete)
            else:  # written batched, after the program has its answer ([ledger] durability)
                ledger.complete_later(call_id, stored, receipt=receipt, filtered=filtered)

    async def _send_read(self, call: Call, intent: CallIntent) -> CallOutcome | ServerRefusedError:
        """Send a read at once; queue its one record once it is over (see :mod:`codemode.ledger`'s
        ``_reads``). Nothing is awaited on the ledger. Returns the refusal to retry on."""
        answers: list[Mapping[str, Any]] = []

        async def remember(answer: Mapping[str, Any]) -> None:
            answers.append(answer)

        started = time.perf_counter()

        def record(outcome: Completion | None, **fields: Any) -> None:
            elapsed = time.perf_counter() - started
            self.ledger.record_read(
                ReadRecord(intent=intent, outcome=outcome, elapsed_s=elapsed, inputs=tuple(answers), **fields)
            )

        try:
            result = await self._ask_server(call, intent.call_id, remember, self._task_time_limit(call))
        except ServerRefusedError as exc:
            record(None, refused=exc.reason, retry_after_s=exc.retry_after)
            return exc
        except ServerUnavailableError as exc:
            record(None, refused=exc.reason)
            return CallFailed(reason=exc.summary)
        except (ServerRejectedError, OutcomeUnknownError) as exc:
            # A read without an answer is not "unknown": running it or not changes nothing.
            failure = CallFailed(reason=f"{exc} (a read-only call: calling it again is safe)")
            record(failure)
            return failure
        except anyio.get_cancelled_exc_class():
            record(CallFailed(reason="the run was cancelled during the call"))
            raise
        except Exception as exc:
            failure = CallFailed(reason=f"internal error: {exc!r}")
            record(failure)
            return failure
        outcome, stored, receipt, filtered = self.outcomes.fresh(call, result)
        record(stored, receipt=receipt, filtered=filtered)
        return outcome

    async def _record(self, call_id: str, write: Callable[[], object]) -> None:
        """Write to the ledger even if the run is being cancelled: the record must not be lost.

        If the store is out of reach, the outcome of ``call_id`` is lost with it: release the
        call, so that the next call with its key finds it ``unknown`` at once instead of
        waiting for its lease to expire.
        """
        try:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(write, limiter=self._ledger_lane)
        except StoreError:
            self.ledger.release(call_id)
            raise

    async def _record_input(self, call_id: str, answer: Mapping[str, Any]) -> None:
        await self._record(call_id, partial(self.ledger.record_input, call_id, answer))

    # -- resources and prompts -------------------------------------------------------------------

    async def read_resource(self, binding: RunBinding, request: ResourceReadRequest) -> CallOutcome:
        async def fetch() -> list[BaseModel]:
            return list((await self.backend.read_resource(request.server, request.uri)).contents)

        outcome = await self._read_only(binding, "resource", request.server, request.uri, "contents", fetch)
        return self._reason_filtered(binding, outcome)

    async def get_prompt(self, binding: RunBinding, request: PromptGetRequest) -> CallOutcome:
        async def fetch() -> list[BaseModel]:
            prompt = await self.backend.get_prompt(request.server, request.name, dict(request.arguments))
            return list(prompt.messages)

        outcome = await self._read_only(binding, "prompt", request.server, request.name, "messages", fetch)
        return self._reason_filtered(binding, outcome)

    async def _read_only(
        self,
        binding: RunBinding,
        kind: CallKind,
        server: str,
        name: str,
        key: str,
        fetch: Callable[[], Awaitable[list[BaseModel]]],
    ) -> CallOutcome:
        """Resources and prompts: principal, server grant and budget, then the result filters
        and the run's byte count, as for a tool's answer."""
        run = self._state(binding)
        if run is None:
            return CallDenied(gate="principal", reason="no open run is bound to this call")
        call = Call(
            binding=binding,
            run=run,
            server=server,
            name=name,
            arguments={},
            now=self.clock().timestamp(),
            kind=kind,
        )
        decision = await self._decide(call, self._read_gates, Facts())
        if isinstance(decision, Allow):
            decision = self.budget.commit(call, decision.facts) or decision
        if isinstance(decision, Deny):
            return await self._deny(call, decision)
        try:
            items = await fetch()
        except CodemodeError as exc:
            return CallFailed(reason=exc.summary)
        except Exception as exc:
            return CallFailed(reason=f"{type(exc).__name__}: {exc}")
        dumped = [item.model_dump(mode="json", by_alias=True, exclude_none=True) for item in items]
        answer = self.outcomes.fresh(
            call, mcp_types.CallToolResult(content=[], structured_content={key: dumped})
        )
        if answer.filtered.get("truncated"):
            # A cut would leave no item whole: say so rather than hand back a silently empty list.
            limit = self.policy.results.max_tool_result_bytes
            return CallFailed(
                reason=f"{call.label}: the {kind} is larger than [policy.results] max_tool_result_bytes "
                f"({limit:,} bytes); not returned"
            )
        return answer.outcome
