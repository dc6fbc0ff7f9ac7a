"""Who can approve a risky call, and the request they see.

Approvers are asked only by the consent gate, with a summary built from the arguments *as the
program passed them* (PII placeholders are not revealed to the approver's screen).
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

import anyio

from codemode.config import Risk


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
    """Asks on the controlling terminal (``/dev/tty``), so it works even when stdout is piped."""

    def __init__(self, tty_path: str = "/dev/tty") -> None:
        self.tty_path = tty_path
        self._lock = anyio.Lock()

    def _prompt(self, request: ApprovalRequest) -> ApprovalAnswer:
        try:
            with open(self.tty_path, "r+", encoding="utf-8") as tty:
                tty.write(
                    f"\n[codemode] approval needed for {request.server}/{request.tool} "
                    f"(call {request.call_id}, risk {request.risk})\n"
                    f"  why: {request.why}\n  arguments: {request.arguments_summary}\n"
                    "  approve this one call? [y/N] "
                )
                tty.flush()
                line = tty.readline().strip().lower()
        except OSError as exc:
            return ApprovalAnswer(False, "terminal", f"no terminal to ask on ({exc.strerror})")
        return ApprovalAnswer(line in ("y", "yes"), "terminal", "" if line in ("y", "yes") else "declined")

    async def ask(self, request: ApprovalRequest) -> ApprovalAnswer:
        # One prompt at a time: concurrent calls must not interleave their questions.
        async with self._lock:
            return await anyio.to_thread.run_sync(self._prompt, request, abandon_on_cancel=True)


def terminal_available() -> bool:
    try:
        with open("/dev/tty", encoding="utf-8"):
            return sys.stdin.isatty()
    except OSError:
        return False
