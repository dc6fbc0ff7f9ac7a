"""Asking the MCP client: consent to a call, or a downstream server's question, relayed.

Three kinds of question go to the MCP client that asked for a run: an approval (the consent
gate needs one), a downstream server's request for input during one of the run's tool calls
(elicitation), relayed as the server asked it, naming who asks; and a downstream server's
request for a model completion (sampling, with ``sampling = "relay"``), relayed to the client's
model after the broker filtered and budgeted it.

Handshake-era clients with a back-channel get an ``elicitation/create`` (or
``sampling/createMessage``) request in the middle of the ``run_code`` call. Stateless
2026-07-28 clients have no back-channel: ``run_code`` returns an ``InputRequiredResult``
carrying the question, the run keeps waiting in the background, and the client's retry (with
``inputResponses`` and the echoed ``requestState``) delivers the answer and waits for the rest
of the run.

Either way: decline, cancel, no answer before expiry, or a client that cannot be asked, means
the call is denied (an approval), the request is cancelled (a relayed question) or refused (a
completion), with a reason. Every answer names who gave it (:func:`answerer`): the caller who
started the run, the only one who can answer it. Over HTTP with bearer tokens a back-channel
answer arrives on an MCP session bound to that caller (:mod:`codemode.serve._sessions`) and an
input round's retry is taken only from them (:meth:`PendingRuns.take`); without tokens every
caller is the one configured principal.
"""

from __future__ import annotations

import json
import logging
import secrets
import time
from dataclasses import dataclass, field
from typing import Protocol, cast

import anyio
import mcp_types
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.server.mcpserver import Context
from mcp.shared.message import ServerMessageMetadata

from codemode.broker import (
    ApprovalAnswer,
    ApprovalRequest,
    ElicitationAnswer,
    ElicitationRequest,
    SamplingAnswer,
    SamplingRequest,
)

log = logging.getLogger("codemode.serve")


def yes_no_schema(question: str) -> dict[str, object]:
    """The form of an approval: one boolean, ``approve``, asked as ``question``."""
    return {
        "type": "object",
        "properties": {"approve": {"type": "boolean", "title": "Approve", "description": question}},
        "required": ["approve"],
    }


APPROVAL_SCHEMA = yes_no_schema("Allow this one call?")


def approval_message(request: ApprovalRequest) -> str:
    remaining = max(0, int(request.expires_at - time.time()))
    return (
        f"codemode asks for approval of one tool call.\n"
        f"Tool: {request.server}/{request.tool} (risk: {request.risk})\n"
        f"Why: {request.why}\n"
        f"Arguments: {request.arguments_summary}\n"
        f"Call: {request.call_id} - this approval expires in {remaining} s and covers only this call."
    )


def approval_params(request: ApprovalRequest) -> mcp_types.ElicitRequestFormParams:
    return mcp_types.ElicitRequestFormParams(
        message=approval_message(request),
        requested_schema=APPROVAL_SCHEMA,  # type: ignore[arg-type]
    )


CLIENT = "mcp-client"
"""Who answers through the MCP client, before :func:`answerer` adds whose client it is."""


def answerer(channel: str, principal: str | None, tenant: str | None) -> str:
    """Who answers a question put through ``channel``, for the record: the caller's principal
    and tenant, quoted (names are free text), e.g. ``mcp-client (principal "alice", tenant
    "acme")``."""
    named = [f"principal {json.dumps(principal or '')}"]
    if tenant:
        named.append(f"tenant {json.dumps(tenant)}")
    return f"{channel} ({', '.join(named)})"


def answer_from(result: mcp_types.ElicitResult | None, who: str) -> ApprovalAnswer:
    if result is None:
        return ApprovalAnswer(False, who, "no answer")
    if result.action != "accept":
        return ApprovalAnswer(False, who, f"the user chose {result.action}")
    content = result.content or {}
    if content.get("approve") is True:
        return ApprovalAnswer(True, who)
    return ApprovalAnswer(False, who, "the user did not approve")


def relayed_message(request: ElicitationRequest) -> str:
    return (
        f"The server {request.server!r} asks, during its tool {request.tool} "
        f"(call {request.call_id} of a codemode run):\n{request.message}"
    )


def relayed_answer(result: mcp_types.ElicitResult | None, who: str) -> ElicitationAnswer:
    if result is None:
        return ElicitationAnswer("cancel", answered_by=who)
    return ElicitationAnswer(result.action, result.content, answered_by=who)


def relayed_params(request: ElicitationRequest) -> mcp_types.ElicitRequestParams:
    if request.mode == "url":
        return mcp_types.ElicitRequestURLParams(
            message=relayed_message(request),
            url=request.url or "",
            elicitation_id=request.elicitation_id or request.call_id,
        )
    return mcp_types.ElicitRequestFormParams(
        message=relayed_message(request),
        requested_schema=dict(request.schema),  # type: ignore[arg-type]
    )


def can_elicit(ctx: Context) -> bool:
    caps = ctx.client_capabilities
    return caps is not None and caps.elicitation is not None


def can_sample(ctx: Context) -> bool:
    caps = ctx.client_capabilities
    return caps is not None and caps.sampling is not None


RELAYED_META = "io.codemode/relayed-for"
"""The ``_meta`` key that tells the client which server, tool and call a relayed completion is for
(2025-11-25 only: a request embedded in a 2026-07-28 input round has no ``_meta``)."""


def sampling_params(request: SamplingRequest) -> mcp_types.CreateMessageRequestParams:
    """The (already filtered) request, naming who asks in its ``_meta``."""
    relayed = {"server": request.server, "tool": request.tool, "call_id": request.call_id}
    meta = cast(mcp_types.RequestParamsMeta, {RELAYED_META: relayed})
    return request.params.model_copy(update={"meta": meta})


class Asker(Protocol):
    """One way to put a question to the MCP client's user: the back-channel (2025-11-25) or the
    pending run's next input round (2026-07-28)."""

    @property
    def name(self) -> str:
        """Who answers, for the record."""
        ...

    @property
    def available(self) -> bool:
        """Whether the client declared that it can be asked (elicitation)."""
        ...

    async def ask(
        self, params: mcp_types.ElicitRequestParams, within_s: float
    ) -> mcp_types.ElicitResult | None:
        """The client's answer (None: it replied without one). Raises TimeoutError after
        ``within_s``, or whatever the client's failure was."""
        ...

    @property
    def sampling_available(self) -> bool:
        """Whether the client declared that it can sample its model."""
        ...

    async def sample(
        self, params: mcp_types.CreateMessageRequestParams, within_s: float
    ) -> mcp_types.CreateMessageResult | None:
        """The client model's completion (None: it replied without one); raises like :meth:`ask`."""
        ...


class BackChannel:
    """A handshake-era connection's way back to the client (``elicitation/create``), shared by the
    approvals and the relayed questions of one ``run_code`` request: one question at a time.
    ``name`` is who answers (see :func:`answerer`)."""

    def __init__(self, ctx: Context, name: str) -> None:
        self._ctx = ctx
        self.name = name
        self._lock = anyio.Lock()

    @property
    def available(self) -> bool:
        return can_elicit(self._ctx)

    async def ask(self, params: mcp_types.ElicitRequestParams, within_s: float) -> mcp_types.ElicitResult:
        session, related = self._ctx.session, self._ctx.request_id
        async with self._lock:
            with anyio.fail_after(within_s):
                if isinstance(params, mcp_types.ElicitRequestURLParams):
                    return await session.elicit_url(
                        params.message, params.url, params.elicitation_id or "", related_request_id=related
                    )
                return await session.elicit_form(
                    params.message, params.requested_schema, related_request_id=related
                )

    @property
    def sampling_available(self) -> bool:
        return can_sample(self._ctx)

    async def sample(
        self, params: mcp_types.CreateMessageRequestParams, within_s: float
    ) -> mcp_types.CreateMessageResult:
        session, related = self._ctx.session, self._ctx.request_id
        async with self._lock:
            with anyio.fail_after(within_s):
                # send_request, not the SDK's create_message: that rebuilds the params field by
                # field (dropping the _meta that names who asks) and is marked deprecated.
                return await session.send_request(
                    mcp_types.CreateMessageRequest(params=params),
                    mcp_types.CreateMessageResult,
                    metadata=ServerMessageMetadata(related_request_id=related),
                )


class ClientApprover:
    """Asks the MCP client's user to approve a call; no answer, or a client that cannot be
    asked, is a denial."""

    def __init__(self, asker: Asker) -> None:
        self._asker = asker

    async def ask(self, request: ApprovalRequest) -> ApprovalAnswer:
        return await ask_approval(
            self._asker, approval_params(request), max(1.0, request.expires_at - time.time())
        )


async def ask_approval(
    asker: Asker, params: mcp_types.ElicitRequestFormParams, within_s: float
) -> ApprovalAnswer:
    """Put one approval (a form with ``approve``: see :func:`yes_no_schema`) to the client's user.
    Anything but an accepted ``approve: true`` is a no: a client that cannot be asked
    (``unreachable``), no answer within ``within_s``, or a client that failed to answer."""
    if not asker.available:
        reason = "the MCP client does not support elicitation"
        return ApprovalAnswer(False, asker.name, reason, unreachable=True)
    try:
        result = await asker.ask(params, within_s)
    except TimeoutError:
        return ApprovalAnswer(False, asker.name, "no answer before the approval expired")
    except Exception as exc:  # the client failed to answer: fail closed
        return ApprovalAnswer(False, asker.name, f"the client could not be asked ({exc})")
    return answer_from(result, asker.name)


RELAY_WAIT_S = 600.0
"""How long a relayed question waits for the client's answer before it is cancelled."""


class ClientElicitor:
    """Relays a downstream server's request for input to the MCP client's user."""

    def __init__(self, asker: Asker) -> None:
        self._asker = asker

    async def elicit(self, request: ElicitationRequest) -> ElicitationAnswer:
        who = self._asker.name
        if not self._asker.available:
            return ElicitationAnswer("cancel", answered_by=who)
        try:
            result = await self._asker.ask(relayed_params(request), RELAY_WAIT_S)
        except TimeoutError:
            return ElicitationAnswer("cancel", answered_by=who)
        except Exception:  # the client failed to answer: nobody said yes
            log.warning("relaying a request for input to the MCP client failed", exc_info=True)
            return ElicitationAnswer("cancel", answered_by=who)
        return relayed_answer(result, who)


class ClientSampler:
    """Relays a downstream server's request for a completion to the MCP client's model."""

    def __init__(self, asker: Asker) -> None:
        self._asker = asker

    async def sample(self, request: SamplingRequest) -> SamplingAnswer:
        asker = self._asker
        if not asker.sampling_available:
            return SamplingAnswer(answered_by=asker.name, refusal="the MCP client does not support sampling")
        try:
            result = await asker.sample(sampling_params(request), RELAY_WAIT_S)
        except TimeoutError:
            return SamplingAnswer(answered_by=asker.name, refusal="the MCP client gave no completion in time")
        except Exception as exc:  # the client refused or failed: the server gets no completion
            return SamplingAnswer(
                answered_by=asker.name, refusal=f"the MCP client gave no completion ({exc})"
            )
        if result is None:
            return SamplingAnswer(answered_by=asker.name, refusal="the MCP client gave no completion")
        return SamplingAnswer(result, answered_by=asker.name)


@dataclass
class _Question:
    """One question for the client of a pending run, and the answer its retry brought."""

    request: mcp_types.ElicitRequest | mcp_types.CreateMessageRequest
    answer: anyio.Event = field(default_factory=anyio.Event)
    result: mcp_types.InputResponse | None = None
    nonce: str = field(default_factory=lambda: secrets.token_urlsafe(12))
    """Names this question in the ``requestState`` it is asked with: an answer counts only for the
    question it was given to, so a replayed retry cannot approve the question asked after it."""
    expires_at: float = 0.0
    """When the run stops waiting for the answer (``time.time()``; 0: unknown)."""


@dataclass
class PendingRun:
    """A run that outlives the request that started it, waiting for the client's answers; its
    questions ride the next input round of ``run_code`` (an :class:`Asker`), and its last event is
    the ``run_code`` result."""

    token: str
    principal: str
    tenant: str
    events_in: MemoryObjectSendStream[_Question | mcp_types.CallToolResult]
    events_out: MemoryObjectReceiveStream[_Question | mcp_types.CallToolResult]
    available: bool = False
    """Whether the client that started the run declared elicitation."""
    sampling_available: bool = False
    """Whether it declared sampling."""
    waiting: _Question | None = None
    idle_since: float | None = None
    """Since when the run has waited for the client to come back with an answer (None: a request
    of the client is with it, or it is working)."""
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    """Cancels the background run when the client abandons it."""
    asking: anyio.Lock = field(default_factory=anyio.Lock)
    """One question at a time: the client answers the one its retry carries."""
    name: str = CLIENT
    """Who answers (see :func:`answerer`)."""

    async def ask(
        self, params: mcp_types.ElicitRequestParams, within_s: float
    ) -> mcp_types.ElicitResult | None:
        result = await self._put(mcp_types.ElicitRequest(params=params), within_s)
        return result if isinstance(result, mcp_types.ElicitResult) else None

    async def sample(
        self, params: mcp_types.CreateMessageRequestParams, within_s: float
    ) -> mcp_types.CreateMessageResult | None:
        result = await self._put(mcp_types.CreateMessageRequest(params=params), within_s)
        return result if isinstance(result, mcp_types.CreateMessageResult) else None

    async def _put(
        self, request: mcp_types.ElicitRequest | mcp_types.CreateMessageRequest, within_s: float
    ) -> mcp_types.InputResponse | None:
        async with self.asking:
            question = _Question(request, expires_at=time.time() + within_s)
            await self.events_in.send(question)
            with anyio.fail_after(within_s):
                await question.answer.wait()
            return question.result


class PendingRuns:
    """Registry of runs waiting on input-required answers, keyed by an unguessable token."""

    def __init__(self) -> None:
        self._runs: dict[str, PendingRun] = {}

    def create(
        self, principal: str, tenant: str, *, client_can_elicit: bool, client_can_sample: bool = False
    ) -> PendingRun:
        send, receive = anyio.create_memory_object_stream[_Question | mcp_types.CallToolResult](8)
        run = PendingRun(
            secrets.token_urlsafe(24),
            principal,
            tenant,
            send,
            receive,
            client_can_elicit,
            client_can_sample,
            name=answerer(CLIENT, principal, tenant),
        )
        self._runs[run.token] = run
        return run

    def take(self, request_state: str, principal: str, tenant: str) -> tuple[PendingRun, str] | None:
        """The run a retry's ``requestState`` names, and the question it answers."""
        token, _, nonce = request_state.partition(".")
        run = self._runs.get(token)
        # A run's answers come only from the principal that started it.
        if run is None or (run.principal, run.tenant) != (principal, tenant):
            return None
        return run, nonce

    def forget(self, token: str) -> None:
        self._runs.pop(token, None)

    def expire(self, idle_for_s: float) -> int:
        """Drop (and cancel) runs whose client has not come back to answer for ``idle_for_s``. A
        run that is working, or whose client's request is still open, is never dropped here."""
        cutoff = time.monotonic() - idle_for_s
        stale = [token for token, run in self._runs.items() if _idle_before(run, cutoff)]
        for token in stale:
            self._runs.pop(token).scope.cancel()
        return len(stale)

    def __len__(self) -> int:
        return len(self._runs)


def _idle_before(run: PendingRun, cutoff: float) -> bool:
    return run.idle_since is not None and run.idle_since < cutoff


def input_request(question: _Question) -> mcp_types.InputRequests:
    return {"question": question.request}


def asked(run: PendingRun, question: _Question) -> mcp_types.InputRequiredResult:
    """The result that puts ``question`` to the client; its retry comes back with the state."""
    run.waiting = question
    run.idle_since = time.monotonic()
    return mcp_types.InputRequiredResult(
        input_requests=input_request(question), request_state=f"{run.token}.{question.nonce}"
    )


def deliver(run: PendingRun, nonce: str, responses: mcp_types.InputResponses | None) -> bool:
    """Hand the client's answer to the question the run is waiting on (missing answer = no).
    False, and nothing delivered, when ``nonce`` names another question: a retry replayed after
    its question was answered, or sent twice at once."""
    question = run.waiting
    if question is None or not secrets.compare_digest(nonce, question.nonce):
        return False
    run.idle_since = None
    response = (responses or {}).get("question")
    # An answer of the wrong kind (a completion for a question) is no answer.
    wanted = (
        mcp_types.ElicitResult
        if isinstance(question.request, mcp_types.ElicitRequest)
        else mcp_types.CreateMessageResult
    )
    question.result = response if isinstance(response, wanted) else None
    run.waiting = None
    question.answer.set()
    return True
