"""Budget gate: calls per run and per tool, result bytes, money and wall time, checked exactly.

Counters live in the run's state under a lock, so a loop of 100,000 calls stops at exactly the
configured number, and concurrent calls cannot overshoot it. The concurrency cap is a
semaphore around the MCP call itself (see the broker), not a counter here.
"""

from __future__ import annotations

from codemode.broker._context import CallContext
from codemode.broker._decisions import Allow, Decision, Deny
from codemode.broker._selectors import lookup
from codemode.config import PolicyConfig


class BudgetGate:
    name = "budget"

    def __init__(self, policy: PolicyConfig) -> None:
        self.budget = policy.budget

    async def check(self, ctx: CallContext) -> Decision:
        budget = self.budget
        run = ctx.run
        server, tool = ctx.request.server, ctx.request.tool
        per_tool = lookup(budget.calls_per_tool, server, tool)
        cost = lookup(budget.costs, server, tool) or 0.0
        with run.lock:
            if run.elapsed() > budget.wall_time_s:
                return Deny(self.name, f"the run has used its wall-time budget ({budget.wall_time_s:g} s)")
            if run.calls_allowed >= budget.calls_per_run:
                return Deny(self.name, f"call budget exhausted ({budget.calls_per_run} calls per run)")
            if per_tool is not None and run.calls_per_tool[ctx.label] >= per_tool:
                return Deny(self.name, f"call budget for {ctx.label} exhausted ({per_tool} per run)")
            if run.result_bytes >= budget.result_bytes_per_run:
                return Deny(
                    self.name, f"result budget exhausted ({budget.result_bytes_per_run:,} bytes per run)"
                )
            if budget.money_per_run is not None and run.money_spent + cost > budget.money_per_run + 1e-9:
                return Deny(
                    self.name,
                    f"{ctx.label} costs {cost:g}; "
                    f"{run.money_spent:g} of {budget.money_per_run:g} already spent",
                )
            run.calls_allowed += 1
            run.calls_per_tool[ctx.label] += 1
            run.money_spent += cost
        ctx.cost = cost
        return Allow()

    def refund(self, ctx: CallContext) -> None:
        """Give back what :meth:`check` took, for a call a later gate refused."""
        run = ctx.run
        with run.lock:
            run.calls_allowed -= 1
            run.calls_per_tool[ctx.label] -= 1
            run.money_spent -= ctx.cost
