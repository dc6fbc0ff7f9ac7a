"""What a program in the sandbox asks of the host, and what it gets back.

These values cross the seam between the sandbox (which knows nothing about MCP) and the
broker (which knows nothing about Docker). The sandbox side builds requests from untrusted
channel messages; identity, tenant and approvals are never part of a request: the host binds
them to the run (see :class:`RunBinding`).

Outcomes are a discriminated union on ``kind``; the runtime inside the sandbox turns each
kind into a return value or a typed exception.

The broker, once its gates let a call through, hands it to whoever sends MCP requests (the
host) with one :class:`SendOptions`: the per-call choices that are neither the tool nor its
arguments. Its :class:`InputHandler` is how the host reaches back to the broker when the server
asks for input during the call.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    # Only named in annotations: the sandbox side imports this module and needs no MCP types.
    import mcp_types

__all__ = [
    "PLAIN_CALL",
    "CallDenied",
    "CallFailed",
    "CallHandler",
    "CallOutcome",
    "CallPlanned",
    "CallProgress",
    "ContentBlock",
    "InputHandler",
    "ModuleProvider",
    "ModuleSource",
    "ProgressListener",
    "PromptGetRequest",
    "ResourceReadRequest",
    "RunBinding",
    "SamplingHandler",
    "SendOptions",
    "SkillProposal",
    "SkillProposer",
    "ToolCallRequest",
    "ToolError",
    "ToolResult",
]


class _Value(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class RunBinding(_Value):
    """Who a run acts for. Set by the host when the run starts; the sandbox cannot change it."""

    run_id: str
    principal: str
    tenant: str
    trace_id: str
    session_id: str | None = None
    expires_at: float | None = None
    """Unix time after which the run context is expired and every call is refused."""
    idempotency_scope: str | None = None
    """Set for batch items (``job:<id>/item:<key>``): every side-effecting call without its own key
    gets one derived from this scope, the tool, its arguments and its occurrence in the run, so a
    re-run of the item replays completed calls instead of repeating them."""
    read_only: bool = False
    """A checking run (a batch item's verify program): every call not known to be read-only
    (risk ``low``) is refused, whatever the consent policy says."""
    compensates: str | None = None
    """Set for a run that codemode makes to undo one completed call (a compensation): the id of
    that call, recorded on the compensating call's ledger row."""


class ToolCallRequest(_Value):
    """One stub call: ``server``/``tool`` as the stub names them, with the hash it was rendered from."""

    seq: int = Field(ge=0, description="Per-run sequence number; the call id is '<run_id>/<seq>'.")
    server: str
    tool: str
    schema_hash: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    idempotency_key: str | None = None
    skill: str | None = Field(default=None, max_length=200)
    """``name@version`` of the saved skill whose code made the call, as the in-sandbox runtime
    reports it: recorded in the ledger for the audit, never read by a gate (the call is gated
    as the run's own, whoever wrote the code)."""


class ResourceReadRequest(_Value):
    seq: int = Field(ge=0)
    server: str
    uri: str


class PromptGetRequest(_Value):
    seq: int = Field(ge=0)
    server: str
    name: str
    arguments: dict[str, str] = Field(default_factory=dict)


class ContentBlock(_Value):
    """One content item of a result, in MCP wire shape (``type`` plus its fields)."""

    model_config = ConfigDict(frozen=True, extra="allow")
    type: str


class ToolResult(_Value):
    """The call went through and the server answered without ``isError``."""

    kind: Literal["ok"] = "ok"
    structured: Any = None
    content: tuple[ContentBlock, ...] = ()
    truncated: bool = False
    """The result filter cut the result to its size cap."""


class ToolError(_Value):
    """The server answered with ``isError: true`` (the tool ran and reported a failure)."""

    kind: Literal["tool_error"] = "tool_error"
    message: str
    content: tuple[ContentBlock, ...] = ()


class CallDenied(_Value):
    """A broker gate refused the call; nothing was sent to the server."""

    kind: Literal["denied"] = "denied"
    gate: str
    reason: str


class CallFailed(_Value):
    """The call could not be completed (server down, timeout, unknown outcome, conflict)."""

    kind: Literal["failed"] = "failed"
    reason: str
    outcome_unknown: bool = False
    """True when the request may have reached the server: it is never retried automatically."""


class CallPlanned(_Value):
    """A dry run recorded the call as planned call ``index`` instead of sending it: the program
    gets a placeholder that it may pass on but not inspect."""

    kind: Literal["planned"] = "planned"
    index: int


CallOutcome = Annotated[
    ToolResult | ToolError | CallDenied | CallFailed | CallPlanned, Field(discriminator="kind")
]


@dataclass(frozen=True)
class CallProgress:
    """Something a call in flight reported: a progress notification or a task's status change."""

    server: str
    tool: str
    task_id: str | None = None
    status: str | None = None
    """The task's status (``working``, ``completed``...) when this is a status change."""
    progress: float | None = None
    total: float | None = None
    message: str | None = None

    def describe(self) -> str:
        """One line for a person: ``crm/export: working 40/100 (reading rows)``."""
        parts = [f"{self.server}/{self.tool}:"]
        if self.status is not None:
            parts.append(self.status)
        if self.progress is not None:
            parts.append(f"{self.progress:g}" + (f"/{self.total:g}" if self.total is not None else ""))
        if self.message:
            parts.append(f"({self.message})")
        return " ".join(parts)


ProgressListener = Callable[[CallProgress], Awaitable[None]]
"""Receives the progress of calls in flight (it must not fail: a failure is logged, never raised)."""


class InputHandler(Protocol):
    """Answers the server's requests for input during one tool call (the broker makes one per call)."""

    async def elicit(
        self, params: mcp_types.ElicitRequestParams
    ) -> mcp_types.ElicitResult | mcp_types.ErrorData: ...


@runtime_checkable
class SamplingHandler(Protocol):
    """An :class:`InputHandler` that also answers requests for model completions (the broker's)."""

    async def sample(
        self, params: mcp_types.CreateMessageRequestParams
    ) -> mcp_types.CreateMessageResult | mcp_types.ErrorData: ...


@dataclass(frozen=True)
class SendOptions:
    """How one tool call is sent, besides its server, tool and arguments.

    The default is a plain call: no extra ``_meta``, every request for input refused, the
    server's ``call_timeout``, and nobody listening to progress.
    """

    meta: Mapping[str, Any] = field(default_factory=dict[str, Any])
    """Sent as the request's ``_meta`` (the trace context); the host adds its own keys."""
    inputs: InputHandler | None = None
    """Answers the server's requests for input during this call; without it they are refused."""
    time_limit_s: float | None = None
    """Bounds a long-running (task) call; other calls keep the server's ``call_timeout``."""
    on_progress: ProgressListener | None = None
    """Hears what the call reports while it is in flight (progress, a task's status)."""


PLAIN_CALL = SendOptions()
"""The options of a plain call, for senders whose ``options`` may be left out."""


class ModuleSource(_Value):
    source: str
    is_package: bool


class ModuleProvider(Protocol):
    """Serves stub modules to the sandbox's import hook, already filtered for the run's principal."""

    def module_source(self, module: str) -> ModuleSource | None:
        """Return the source of ``module`` (dotted, e.g. ``servers.crm.get_customer``), or None."""
        ...


class SkillProposal(_Value):
    """A saved skill a program proposes (``codemode.propose_skill``): only a proposal, which a
    person approves, or not, later."""

    name: str
    source: str
    description: str = ""


@runtime_checkable
class SkillProposer(Protocol):
    """Records a program's skill proposal. A ``CallHandler`` that also implements this lets runs
    propose skills; without it, a proposal is refused."""

    async def propose_skill(self, binding: RunBinding, proposal: SkillProposal) -> CallOutcome: ...


class CallHandler(Protocol):
    """Executes the sandbox's requests for one run. The broker implements it."""

    async def call_tool(self, binding: RunBinding, request: ToolCallRequest) -> CallOutcome: ...

    async def read_resource(self, binding: RunBinding, request: ResourceReadRequest) -> CallOutcome: ...

    async def get_prompt(self, binding: RunBinding, request: PromptGetRequest) -> CallOutcome: ...


def content_blocks(items: Mapping[str, Any] | list[Any]) -> tuple[ContentBlock, ...]:
    """Build content blocks from wire dicts, ignoring items without a ``type``."""
    seq = [items] if isinstance(items, Mapping) else items
    return tuple(
        ContentBlock.model_validate(item) for item in seq if isinstance(item, Mapping) and "type" in item
    )
