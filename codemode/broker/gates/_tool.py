"""Tool gate: the call names a tool this principal may use, whose definition is the approved pin.

Three hashes must agree: the one the stub was rendered from (sent with every call), the
approved pin in codemode.lock, and the one the server lists right now. Any disagreement is a
drift (or a rug-pull) and fails closed until a person reviews and approves the new definition.
"""

from __future__ import annotations

from typing import Protocol

import anyio

from codemode.broker._decisions import Allow, Decision, Deny
from codemode.broker._facts import Call, Facts
from codemode.broker._risk import tool_risk
from codemode.broker._visibility import may_use
from codemode.broker.gates._memo import remembered
from codemode.broker.gates._ways_out import lowering_ways, ways_out_text
from codemode.catalog import LockFile, PinnedDefinition, ToolSpec
from codemode.config import PolicyConfig, Risk


class CatalogView(Protocol):
    """What the broker needs to know about servers (the MCP host implements it)."""

    def live_tool(self, server: str, tool: str) -> ToolSpec | None:
        """The definition the server lists now, or None (not listed, or server down)."""
        ...

    async def settle(self, server: str) -> None:
        """Return once a change the server announced (``list_changed``) has been listed, so that
        ``live_tool`` answers with the new definitions (bounded wait; ``live_tool`` fails closed
        after it)."""
        ...

    def is_trusted(self, server: str) -> bool: ...

    def server_version(self, server: str) -> str | None:
        """The version the server reports about itself (``serverInfo.version``), for the record."""
        ...


class LockView(Protocol):
    @property
    def lock(self) -> LockFile: ...

    def reload_if_changed(self) -> bool:
        """Read the lock file again if another process changed it; whether it did."""
        ...


class ToolGate:
    name = "tool"

    def __init__(self, policy: PolicyConfig, catalog: CatalogView, pins: LockView) -> None:
        self.policy = policy
        self.catalog = catalog
        self.pins = pins
        # The policy is frozen for the gate's life, so what it says about a principal and a tool
        # is worked out once, not on every call (glob matching over every selector).
        self._usable: dict[tuple[str, str, str], bool] = {}
        self._risks: dict[tuple[str, str, str, str | None, bool], Risk] = {}

    def _may_use(self, principal: str, server: str, tool: str) -> bool:
        return remembered(
            self._usable, (principal, server, tool), lambda: may_use(self.policy, principal, server, tool)
        )

    def _risk(self, server: str, tool: str, approved: PinnedDefinition, trusted: bool) -> Risk:
        # The pinned hash covers the annotations the risk is read from; hints accepted at review
        # change the risk at the same hash (the lock file is re-read while serving), so they key too.
        return remembered(
            self._risks,
            (server, tool, approved.hash, approved.accepted_risk, trusted),
            lambda: tool_risk(
                self.policy,
                server,
                tool,
                approved.definition.get("annotations"),
                trusted=trusted,
                accepted=approved.accepted_risk,
            ),
        )

    async def check(self, call: Call, facts: Facts) -> Decision:
        request = call.request
        assert request is not None, "the tool gate checks tool calls"
        label = call.label
        if not self._may_use(call.binding.principal, request.server, request.tool):
            return Deny(self.name, f"principal {call.binding.principal!r} may not use {label}")
        entry = self.pins.lock.entry(request.server, request.tool)
        approved = entry.approved if entry else None
        if approved is None:
            return Deny(
                self.name, f"{label} is not approved; review it and run 'codemode pin --approve {label}'"
            )
        if request.schema_hash != approved.hash:
            return Deny(
                self.name,
                f"{label}: the stub was generated from {request.schema_hash[:19]}…, but the approved pin is "
                f"{approved.hash[:19]}… (stale stub or tampered call)",
            )
        # A call right after the server announced a change must see the new listing, not the old.
        await self.catalog.settle(request.server)
        live = self.catalog.live_tool(request.server, request.tool)
        if live is None:
            return Deny(
                self.name,
                f"{label} is not listed by the server now (removed, still being re-listed after the server "
                "announced a change, or the server is down)",
            )
        if live.schema_hash != approved.hash:
            return Deny(
                self.name,
                f"{label} changed since approval (the server now lists {live.schema_hash[:19]}…); "
                f"review with 'codemode pin --diff {label}' and approve to use it",
            )
        trusted = self.catalog.is_trusted(request.server)
        risk = self._risk(request.server, request.tool, approved, trusted)
        return Allow(facts.with_(tool=live, pinned=approved.definition, trusted=trusted, risk=risk))

    async def changed(self, call: Call) -> str | None:
        """Why the tool is no longer the one :meth:`check` passed, or None: for the moment just
        before the request leaves, after any wait for a slot. Nothing awaits after the listing
        settled, so nothing changes between this look and the send."""
        request = call.request
        assert request is not None, "the tool gate checks tool calls"
        await self.catalog.settle(request.server)
        entry = self.pins.lock.entry(request.server, request.tool)
        live = self.catalog.live_tool(request.server, request.tool)
        if entry is None or entry.approved is None or entry.approved.hash != request.schema_hash:
            return (
                "the approved definition of the tool changed (pinned anew or revoked) while the call waited"
            )
        # Not listed now is no change to refuse for here: a server that went down (a failed
        # sign-in drops the connection, say) is the host's to report, with what to do next.
        if live is not None and live.schema_hash != request.schema_hash:
            return "the definition of the tool changed on the server while the call waited"
        return None


class ReadOnlyRunGate:
    """A checking run (``RunBinding.read_only``) may only make calls known to be read-only."""

    name = "consent"

    async def check(self, call: Call, facts: Facts) -> Decision:
        if call.binding.read_only and facts.risk != "low":
            return Deny(
                self.name,
                f"this run may only read, but {call.label} is {facts.risk} risk\n"
                + ways_out_text(lowering_ways(call, facts, "medium")),
            )
        return Allow(facts)


class PinRecheck:
    """The tool gate once more, after a wait (a person answering an approval): the lock file is
    read again first if it changed meanwhile, so that a revocation or another pin counts."""

    name = "tool"

    def __init__(self, gate: ToolGate) -> None:
        self._gate = gate

    async def check(self, call: Call, facts: Facts) -> Decision:
        await anyio.to_thread.run_sync(self._gate.pins.reload_if_changed)
        return await self._gate.check(call, facts)
