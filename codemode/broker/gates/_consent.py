"""Consent gate: risky calls need an approval bound to this exact call.

An approval is bound to the call id, the digest of the canonical arguments, the risk and an
expiry, and it is single-use. Pre-issued approvals (``codemode approve``) are bound to principal,
tenant, tool and argument digest, and to the call that consumes them. Otherwise the configured
approver is asked (a terminal prompt, or elicitation through the MCP client). Nothing a tool
returns or the program sends can grant an approval.
"""

from __future__ import annotations

import functools
import json
import time
from typing import Any, Protocol, cast

import anyio

from codemode._redaction import redact_value
from codemode.broker._approvals import ApprovalAnswer, ApprovalRequest, Approver
from codemode.broker._context import CallContext
from codemode.broker._decisions import Allow, Decision, Deny
from codemode.broker._selectors import any_match
from codemode.config import RISK_ORDER, PolicyConfig
from codemode.ledger import arguments_digest


class ApprovalStore(Protocol):
    def consume_preissued(
        self,
        *,
        principal: str,
        tenant: str,
        server: str,
        tool: str,
        args_digest: str,
        call_id: str,
        now: float,
    ) -> str | None:
        """Atomically use a matching, unexpired, unused pre-issued approval; its id, or None."""
        ...

    def record_granted(self, request: ApprovalRequest, answer: ApprovalAnswer) -> str:
        """Persist an interactive approval, already consumed by ``request.call_id``; its id."""
        ...


def consent_digest(arguments: dict[str, Any], schema: Any) -> str:
    """The digest an approval binds: the arguments with the schema's top-level defaults filled in.

    Stubs send schema defaults explicitly; a person writing ``codemode approve --args`` usually
    does not. Filling defaults on both sides makes the same call digest the same way.
    """
    filled = dict(arguments)
    properties: Any = cast(dict[str, Any], schema).get("properties") if isinstance(schema, dict) else None
    if isinstance(properties, dict):
        for name, spec in cast(dict[str, Any], properties).items():
            if name not in filled and isinstance(spec, dict) and "default" in spec:
                filled[name] = cast(dict[str, Any], spec)["default"]
    return arguments_digest(filled)


def summarize_arguments(arguments: dict[str, object], limit: int = 600) -> str:
    """The arguments as an approver sees them: secrets hidden (screens and logs are not vaults)."""
    text = json.dumps(redact_value(arguments), ensure_ascii=False, sort_keys=True, default=str)
    return text if len(text) <= limit else text[:limit] + "…"


class ConsentGate:
    name = "consent"

    def __init__(self, policy: PolicyConfig, store: ApprovalStore, approver: Approver | None) -> None:
        self.policy = policy
        self.store = store
        self.approver = approver

    def reason_for_consent(self, ctx: CallContext) -> str | None:
        consent = self.policy.consent
        server, tool = ctx.request.server, ctx.request.tool
        if any_match(consent.never, server, tool):
            return None
        if any_match(consent.always, server, tool):
            return f"the policy always requires approval for {ctx.label}"
        if RISK_ORDER[ctx.risk] >= RISK_ORDER[consent.require_at_risk]:
            return f"{ctx.label} is {ctx.risk} risk" + (
                " (not marked read-only)"
                if ctx.risk == "high"
                else " (read-only only by the server's own claim)"
            )
        return None

    async def check(self, ctx: CallContext) -> Decision:
        why = self.reason_for_consent(ctx)
        if why is None:
            return Allow()
        binding = ctx.binding
        digest = consent_digest(ctx.arguments, (ctx.pinned or {}).get("inputSchema"))
        # The store writes to the ledger (a transaction, an fsync): never on the event loop.
        consume = functools.partial(
            self.store.consume_preissued,
            principal=binding.principal,
            tenant=binding.tenant,
            server=ctx.request.server,
            tool=ctx.request.tool,
            args_digest=digest,
            call_id=ctx.call_id,
            now=time.time(),
        )
        approval_id = await anyio.to_thread.run_sync(consume)
        if approval_id is not None:
            ctx.approval_id = approval_id
            return Allow(note="pre-issued approval")
        approver = ctx.run.approver or self.approver
        if approver is None:
            return Deny(
                self.name,
                f"needs approval: {why}. No approver is available here; pre-issue one with "
                f"'codemode approve {ctx.label} --args JSON' or run interactively",
            )
        request = ApprovalRequest(
            call_id=ctx.call_id,
            principal=binding.principal,
            tenant=binding.tenant,
            server=ctx.request.server,
            tool=ctx.request.tool,
            risk=ctx.risk,
            why=why,
            arguments_summary=summarize_arguments(dict(ctx.request.arguments)),
            args_digest=digest,
            expires_at=time.time() + self.policy.consent.approval_ttl_s,
        )
        answer = await approver.ask(request)
        if not answer.approved:
            detail = f": {answer.reason}" if answer.reason else ""
            return Deny(self.name, f"approval for {ctx.label} was not given by {answer.approver}{detail}")
        if time.time() > request.expires_at:
            return Deny(self.name, "the approval arrived after it expired")
        ctx.approval_id = await anyio.to_thread.run_sync(self.store.record_granted, request, answer)
        return Allow(note=f"approved by {answer.approver}")
