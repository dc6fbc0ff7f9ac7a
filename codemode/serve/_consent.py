"""Asking the MCP client for consent: elicitation (2025-11-25) or input-required (2026-07-28).

Handshake-era clients with a back-channel get an ``elicitation/create`` request in the middle
of the ``run_code`` call. Stateless 2026-07-28 clients have no back-channel: ``run_code``
returns an ``InputRequiredResult`` carrying the question, the run keeps waiting in the
background, and the client's retry (with ``inputResponses`` and the echoed ``requestState``)
delivers the answer and waits for the rest of the run.

Either way: decline, cancel, no answer before expiry, or a client that cannot be asked, means
the call is denied with a reason that says which.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field

import anyio
import mcp_types
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.server.mcpserver import Context

from codemode._engine import RunResult
from codemode.broker import ApprovalAnswer, ApprovalRequest

APPROVAL_SCHEMA: dict[str, object] = {
    "type": "object",
    "properties": {"approve": {"type": "boolean", "title": "Approve", "description": "Allow this one call?"}},
    "required": ["approve"],
}


def approval_message(request: ApprovalRequest) -> str:
    remaining = max(0, int(request.expires_at - time.time()))
    return (
        f"codemode asks for approval of one tool call.\n"
        f"Tool: {request.server}/{request.tool} (risk: {request.risk})\n"
        f"Why: {request.why}\n"
        f"Arguments: {request.arguments_summary}\n"
        f"Call: {request.call_id} - this approval expires in {remaining} s and covers only this call."
    )


def answer_from(result: mcp_types.ElicitResult | None, who: str) -> ApprovalAnswer:
    if result is None:
        return ApprovalAnswer(False, who, "no answer")
    if result.action != "accept":
        return ApprovalAnswer(False, who, f"the user chose {result.action}")
    content = result.content or {}
    if content.get("approve") is True:
        return ApprovalAnswer(True, who)
    return ApprovalAnswer(False, who, "the user did not approve")


class ElicitationApprover:
    """Asks over the connection's back-channel (handshake era)."""

    def __init__(self, ctx: Context) -> None:
        self._ctx = ctx
        self._lock = anyio.Lock()

    async def ask(self, request: ApprovalRequest) -> ApprovalAnswer:
        caps = self._ctx.client_capabilities
        if caps is None or caps.elicitation is None:
            return ApprovalAnswer(False, "mcp-client", "the MCP client does not support elicitation")
        async with self._lock:  # one question at a time
            try:
                with anyio.fail_after(max(1.0, request.expires_at - time.time())):
                    result = await self._ctx.session.elicit_form(
                        approval_message(request),
                        APPROVAL_SCHEMA,  # type: ignore[arg-type]
                        related_request_id=self._ctx.request_id,
                    )
            except TimeoutError:
                return ApprovalAnswer(False, "elicitation", "no answer before the approval expired")
            except Exception as exc:  # the client failed to answer: fail closed
                return ApprovalAnswer(False, "elicitation", f"the client could not be asked ({exc})")
        # The same reading of the answer as for input-required responses.
        return answer_from(result, "elicitation")


@dataclass
class _Question:
    request: ApprovalRequest
    answer: anyio.Event = field(default_factory=anyio.Event)
    reply: ApprovalAnswer | None = None


@dataclass
class PendingRun:
    """A run that outlives the request that started it, waiting for the client's answers."""

    token: str
    principal: str
    tenant: str
    events_in: MemoryObjectSendStream[_Question | RunResult]
    events_out: MemoryObjectReceiveStream[_Question | RunResult]
    waiting: _Question | None = None
    created: float = field(default_factory=time.monotonic)
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    """Cancels the background run when the client abandons it."""


class InputRequiredApprover:
    """The approver of a pending run: each question goes to whoever is waiting on the run."""

    def __init__(self, pending: PendingRun, *, client_can_elicit: bool) -> None:
        self._pending = pending
        self._can_elicit = client_can_elicit
        self._lock = anyio.Lock()

    async def ask(self, request: ApprovalRequest) -> ApprovalAnswer:
        if not self._can_elicit:
            return ApprovalAnswer(False, "mcp-client", "the MCP client does not support elicitation")
        async with self._lock:
            question = _Question(request)
            await self._pending.events_in.send(question)
            with anyio.move_on_after(max(1.0, request.expires_at - time.time())):
                await question.answer.wait()
            if question.reply is None:
                return ApprovalAnswer(False, "mcp-client", "no answer before the approval expired")
            return question.reply


class PendingRuns:
    """Registry of runs waiting on input-required answers, keyed by an unguessable token."""

    def __init__(self) -> None:
        self._runs: dict[str, PendingRun] = {}

    def create(self, principal: str, tenant: str) -> PendingRun:
        send, receive = anyio.create_memory_object_stream[_Question | RunResult](8)
        run = PendingRun(secrets.token_urlsafe(24), principal, tenant, send, receive)
        self._runs[run.token] = run
        return run

    def take(self, token: str, principal: str, tenant: str) -> PendingRun | None:
        run = self._runs.get(token)
        # A run's answers come only from the principal that started it.
        if run is None or (run.principal, run.tenant) != (principal, tenant):
            return None
        return run

    def forget(self, token: str) -> None:
        self._runs.pop(token, None)

    def expire(self, older_than_s: float) -> int:
        """Drop (and cancel) runs nobody came back for."""
        cutoff = time.monotonic() - older_than_s
        stale = [token for token, run in self._runs.items() if run.created < cutoff]
        for token in stale:
            self._runs.pop(token).scope.cancel()
        return len(stale)

    def __len__(self) -> int:
        return len(self._runs)


def input_request(question: _Question) -> mcp_types.InputRequests:
    return {
        "approval": mcp_types.ElicitRequest(
            params=mcp_types.ElicitRequestFormParams(
                message=approval_message(question.request),
                requested_schema=APPROVAL_SCHEMA,  # type: ignore[arg-type]
            )
        )
    }


def deliver(run: PendingRun, responses: mcp_types.InputResponses | None) -> None:
    """Hand the client's answer to the question the run is waiting on (missing answer = no)."""
    question = run.waiting
    if question is None:
        return
    response = (responses or {}).get("approval")
    result = response if isinstance(response, mcp_types.ElicitResult) else None
    question.reply = answer_from(result, "mcp-client")
    run.waiting = None
    question.answer.set()
