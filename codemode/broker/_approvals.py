"""Who can approve a risky call, and the request they see.

Approvers are asked only by the approval flow (when the consent gate says a call needs one),
with a summary built from the arguments *as the program passed them* (PII placeholders are not
revealed to the approver's screen; secrets are redacted).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

import anyio

from codemode.broker._terminal import QuestionPause, ask_on_terminal
from codemode.config import Risk
from codemode.ledger import Clock, system_clock


@dataclass(frozen=True)
class ApprovalRequest:
    call_id: str
    principal: str
    tenant: str
    server: str
    tool: str
    risk: Risk
    why: str
    arguments_summary: str
    args_digest: str
    expires_at: float


@dataclass(frozen=True)
class ApprovalAnswer:
    approved: bool
    approver: str
    """Who answered (``terminal``, ``elicitation:<client>``…), for the record."""
    reason: str = ""
    unreachable: bool = False
    """Nobody could be asked (a client that cannot elicit): the denial names the ways out."""


class Approver(Protocol):
    async def ask(self, request: ApprovalRequest) -> ApprovalAnswer: ...


class CallbackApprover:
    """Answers with a function: for tests, scripted agents and embedding applications."""

    def __init__(
        self, answer: Callable[[ApprovalRequest], Awaitable[ApprovalAnswer]], name: str = "callback"
    ):
        self._answer = answer
        self.name = name

    async def ask(self, request: ApprovalRequest) -> ApprovalAnswer:
        return await self._answer(request)


class TerminalApprover:
    """Asks on the controlling terminal (``/dev/tty``), so it works even when stdout is piped.

    It shows the tool, the risk, why, the arguments (secrets redacted) and the expiry, and takes
    one key: ``y`` approves this one call; anything else, Ctrl-C, Ctrl-D or no answer before
    ``timeout_s`` (at most the approval's expiry, on ``clock``: the broker's) denies it.
    ``pause`` is entered around each question (see :data:`QuestionPause`).
    """

    def __init__(
        self,
        tty_path: str = "/dev/tty",
        timeout_s: float = 120.0,
        *,
        clock: Clock = system_clock,
        pause: QuestionPause = contextlib.nullcontext,
    ) -> None:
        self.tty_path = tty_path
        self.timeout_s = timeout_s
        self.clock = clock
        self.pause = pause
        self._lock = anyio.Lock()

    def _question(self, request: ApprovalRequest) -> str:
        expires = time.strftime("%H:%M:%S", time.localtime(request.expires_at))
        return (
            f"\r\n[codemode] approval needed: {request.server}/{request.tool} (risk {request.risk})\r\n"
            f"  why:       {request.why}\r\n"
            f"  arguments: {request.arguments_summary}\r\n"
            f"  call {request.call_id} for {request.principal}@{request.tenant}; expires {expires}\r\n"
            "  approve this one call? [y/N] "
        )

    def _prompt(self, request: ApprovalRequest) -> ApprovalAnswer:
        timeout = max(0.0, min(self.timeout_s, request.expires_at - self.clock().timestamp()))
        with self.pause():
            answer = ask_on_terminal(self.tty_path, self._question(request), timeout)
        return ApprovalAnswer(answer.approved, "terminal", answer.reason)

    async def ask(self, request: ApprovalRequest) -> ApprovalAnswer:
        # One prompt at a time: concurrent calls must not interleave their questions.
        async with self._lock:
            return await anyio.to_thread.run_sync(self._prompt, request, abandon_on_cancel=True)
