"""Budget gate: calls per run and per tool, result bytes, money and wall time, checked exactly.

Counters live in the run's state under a lock, so a loop of 100,000 calls stops at exactly the
configured number, and concurrent calls cannot overshoot it. The concurrency cap is a
semaphore around the MCP call itself (see the broker), not a counter here.
"""

from __future__ import annotations

from codemode.broker._decisions import Allow, Decision, Deny
from codemode.broker._facts import Call, Facts
from codemode.broker._selectors import lookup
from codemode.broker.gates._memo import remembered
from codemode.config import PolicyConfig


class BudgetGate:
    """Checks the budgets before consent (nobody is asked to approve a call the budget would
    refuse), then takes from them after consent with :meth:`commit`, which checks again under the
    same lock: concurrent calls cannot overshoot, and a refused approval costs nothing."""

    name = "budget"

    def __init__(self, policy: PolicyConfig) -> None:
        self.budget = policy.budget
        self._rules: dict[tuple[str, str], tuple[float, int | None]] = {}
        """Per tool: its price and its per-run call cap (glob lookups, done once: the policy is frozen)."""

    def _tool_rules(self, server: str, tool: str) -> tuple[float, int | None]:
        return remembered(
            self._rules,
            (server, tool),
            lambda: (
                lookup(self.budget.costs, server, tool) or 0.0,
                lookup(self.budget.calls_per_tool, server, tool),
            ),
        )

    async def check(self, call: Call, facts: Facts) -> Decision:
        cost = self._tool_rules(call.server, call.name)[0] if call.kind == "tool" else 0.0
        with call.run.lock:
            reason = self._exceeded(call, cost)
        return Deny(self.name, reason) if reason else Allow(facts.with_(cost=cost))

    def commit(self, call: Call, facts: Facts) -> Deny | None:
        """Take the call from the run's budgets, unless another call used them up meanwhile."""
        run = call.run
        with run.lock:
            reason = self._exceeded(call, facts.cost)
            if reason:
                return Deny(self.name, reason)
            run.calls_allowed += 1
            run.money_spent += facts.cost
            if call.kind == "tool":
                run.calls_per_tool[call.label] += 1
        return None

    def _exceeded(self, call: Call, cost: float) -> str | None:
        """Why the call does not fit the run's budgets (call with the run's lock held)."""
        budget, run = self.budget, call.run
        if run.elapsed() > budget.wall_time_s:
            return f"the run has used its wall-time budget ({budget.wall_time_s:g} s)"
        calls_cap = min(
            budget.calls_per_run, run.limits.calls if run.limits.calls is not None else budget.calls_per_run
        )
        if run.calls_allowed >= calls_cap:
            return f"call budget exhausted ({calls_cap} calls per run)"
        if run.result_bytes >= budget.result_bytes_per_run:
            return f"result budget exhausted ({budget.result_bytes_per_run:,} bytes per run)"
        if call.kind != "tool":
            return None  # per-tool caps and prices name tools, not resources or prompts
        per_tool = self._tool_rules(call.server, call.name)[1]
        if per_tool is not None and run.calls_per_tool[call.label] >= per_tool:
            return f"call budget for {call.label} exhausted ({per_tool} per run)"
        caps = [cap for cap in (budget.money_per_run, run.limits.money) if cap is not None]
        if caps and run.money_spent + cost > min(caps) + 1e-9:
            return f"{call.label} costs {cost:g}; {run.money_spent:g} of {min(caps):g} already spent"
        return None
