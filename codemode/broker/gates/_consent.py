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
from collections.abc import Mapping
from typing import Any, Protocol, cast

import anyio

from codemode._redaction import redact_value_counting
from codemode._text import escape_invisible
from codemode.broker._approvals import ApprovalAnswer, ApprovalRequest, Approver
from codemode.broker._decisions import Allow, Decision, Deny, Gate, NeedsApproval
from codemode.broker._facts import Call, Facts
from codemode.broker._selectors import any_match
from codemode.broker.gates._ways_out import approve_line, lowering_ways, ways_out_text
from codemode.catalog import definition_hash
from codemode.config import RISK_ORDER, PolicyConfig
from codemode.ledger import Clock, approval_digest, arguments_digest, system_clock


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


def consent_digest(arguments: dict[str, Any], pinned: Mapping[str, Any] | None) -> str:
    """The digest an approval binds (:func:`~codemode.ledger.approval_digest`): the arguments with
    the pinned schema's top-level defaults filled in, and the pinned definition's hash.

    Stubs send schema defaults explicitly; a person writing ``codemode approve --args`` usually
    does not. Filling defaults on both sides makes the same call digest the same way. With the
    pin's hash, an approval given for one definition of a tool is void for another: once a changed
    tool is approved with ``codemode pin``, approvals issued before no longer apply.
    """
    filled = dict(arguments)
    schema = pinned.get("inputSchema") if pinned is not None else None
    properties: Any = cast(dict[str, Any], schema).get("properties") if isinstance(schema, dict) else None
    if isinstance(properties, dict):
        for name, spec in cast(dict[str, Any], properties).items():
            if name not in filled and isinstance(spec, dict) and "default" in spec:
                filled[name] = cast(dict[str, Any], spec)["default"]
    return approval_digest(arguments_digest(filled), definition_hash(pinned) if pinned is not None else None)


def summarize_arguments(arguments: dict[str, object], limit: int = 600) -> str:
    """The arguments as an approver sees them: secrets hidden (screens and logs are not vaults),
    invisible and reordering characters escaped (the program chose them: a right-to-left override
    must not make ``txt.exe`` read as ``exe.txt``), and a cut announced with its size.

    Hiding is announced too: a value hidden as a secret is sent as written, and the program may
    have dressed a payload up as one (``API_TOKEN=$(curl …|sh)``), so the approver is told that
    part of the call is not shown.
    """
    redacted, hidden = redact_value_counting(arguments)
    shown = json.dumps(redacted, ensure_ascii=False, sort_keys=True, default=str)
    text = escape_invisible(shown)
    if len(text) > limit:
        text = f"{text[:limit]}… ({len(text) - limit:,} more characters not shown)"
    if hidden:
        text += f" [{hidden} value(s) that look like secrets are hidden here but sent as written]"
    return text


class ConsentGate:
    """Says whether a call needs approval, and uses a matching pre-issued one if there is one.

    It never asks anyone: it returns :class:`NeedsApproval`, and :class:`ApprovalFlow` asks.
    """

    name = "consent"

    def __init__(self, policy: PolicyConfig, store: ApprovalStore, clock: Clock = system_clock) -> None:
        self.policy = policy
        self.store = store
        self.clock = clock
        """Decides which pre-issued approvals have expired (the broker's clock)."""

    def reason_for_consent(self, call: Call, facts: Facts) -> str | None:
        consent = self.policy.consent
        # "always" first: when both match (never = ["crm/*"], always = ["crm/add_note"]), failing
        # closed means asking.
        if any_match(consent.always, call.server, call.name):
            return f"the policy always requires approval for {call.label}"
        if any_match(consent.never, call.server, call.name):
            return None
        if RISK_ORDER[facts.risk] >= RISK_ORDER[consent.require_at_risk]:
            return f"{call.label} is {facts.risk} risk" + (
                " (not known to be read-only)" if facts.risk == "high" else " (it may write)"
            )
        return None

    async def check(self, call: Call, facts: Facts) -> Decision:
        why = self.reason_for_consent(call, facts)
        if why is None:
            return Allow(facts)
        binding = call.binding
        # The store writes to the ledger (a transaction, an fsync): never on the event loop.
        consume = functools.partial(
            self.store.consume_preissued,
            principal=binding.principal,
            tenant=binding.tenant,
            server=call.server,
            tool=call.name,
            args_digest=consent_digest(dict(call.arguments), facts.pinned),
            call_id=call.call_id,
            now=self.clock().timestamp(),
        )
        approval_id = await anyio.to_thread.run_sync(consume)
        if approval_id is not None:
            return Allow(facts.with_(approval_id=approval_id), note="pre-issued approval")
        return NeedsApproval(self.name, why, facts)


class ApprovalFlow:
    """Asks a person for an approval the consent gate said a call needs, and records the answer.

    ``recheck`` is the tool gate, run again once the answer is in: a person may take minutes to
    answer, and meanwhile the server may change the tool or someone may pin another definition
    of it. The approval was given for the definition shown; for another one it is void.
    """

    def __init__(
        self,
        policy: PolicyConfig,
        store: ApprovalStore,
        approver: Approver | None,
        recheck: Gate,
        clock: Clock = system_clock,
    ) -> None:
        self.policy = policy
        self.store = store
        self.approver = approver
        self.recheck = recheck
        self.clock = clock
        """Stamps each request's expiry and checks the answer came before it (the broker's clock)."""

    async def obtain(self, call: Call, needs: NeedsApproval) -> Allow | Deny:
        approver = call.run.approver or self.approver
        facts = needs.facts
        if approver is None:
            return Deny(needs.gate, self._no_approver(call, needs))
        request = ApprovalRequest(
            call_id=call.call_id,
            principal=call.binding.principal,
            tenant=call.binding.tenant,
            server=call.server,
            tool=call.name,
            risk=facts.risk,
            why=needs.why,
            arguments_summary=summarize_arguments(dict(call.as_passed)),
            args_digest=consent_digest(dict(call.arguments), facts.pinned),
            expires_at=self.clock().timestamp() + self.policy.consent.approval_ttl_s,
        )
        answer = await approver.ask(request)
        if answer.unreachable and not answer.approved:
            return Deny(needs.gate, self._no_approver(call, needs, answer.reason))
        if not answer.approved:
            detail = f": {answer.reason}" if answer.reason else ""
            return Deny(needs.gate, f"approval for {call.label} was not given by {answer.approver}{detail}")
        if self.clock().timestamp() > request.expires_at:
            return Deny(needs.gate, "the approval arrived after it expired")
        still = await self.recheck.check(call, facts)
        if isinstance(still, Deny | NeedsApproval):
            why = still.reason if isinstance(still, Deny) else still.why
            return Deny(
                still.gate, f"{call.label} changed while its approval was pending, so it is void: {why}"
            )
        approval_id = await anyio.to_thread.run_sync(self.store.record_granted, request, answer)
        return Allow(facts.with_(approval_id=approval_id), note=f"approved by {answer.approver}")

    def _no_approver(self, call: Call, needs: NeedsApproval, why_nobody: str = "") -> str:
        """The refusal when nobody can be asked. Its first line is short and the same for every
        call of the tool (batch groups failed items by it); the lines after it name the ways out."""
        why_nobody = why_nobody or "no terminal, --no-input, or a batch"
        consent = self.policy.consent
        ways = (
            []
            if any_match(consent.always, call.server, call.name)
            else lowering_ways(call, needs.facts, consent.require_at_risk)
        )
        ways.append(approve_line(self.policy, call))
        return "\n".join(
            [
                f"needs approval: {needs.why}",
                f"No approver is available here ({why_nobody}).",
                ways_out_text(ways),
            ]
        )
