"""The broker's gates: each a small unit that allows, denies with a reason, or asks for approval.

Tool calls: principal → tool identity → arguments → resource scope → budget (check) → quota
(check, when ``[policy.quotas]`` sets limits) → consent (which may need a person: the broker's
:class:`ApprovalFlow` asks) → quota (commit) → budget (commit); side effects
(idempotency, ledger), the MCP call and the result filter follow in the broker. Resources and
prompts: principal → server grant → budget. Each gate returns a decision carrying the facts it
established (:mod:`codemode.broker._facts`); none changes shared state.
"""

from codemode.broker.gates._arguments import ArgumentGate
from codemode.broker.gates._budget import BudgetGate
from codemode.broker.gates._consent import (
    ApprovalFlow,
    ApprovalStore,
    ConsentGate,
    consent_digest,
    summarize_arguments,
)
from codemode.broker.gates._principal import PrincipalGate, ServerGate
from codemode.broker.gates._quota import QuotaGate, RunQuotas
from codemode.broker.gates._scope import ScopeGate, check_path
from codemode.broker.gates._tool import CatalogView, ReadOnlyRunGate, ToolGate

__all__ = [
    "ApprovalFlow",
    "ApprovalStore",
    "ArgumentGate",
    "BudgetGate",
    "CatalogView",
    "ConsentGate",
    "PrincipalGate",
    "QuotaGate",
    "ReadOnlyRunGate",
    "RunQuotas",
    "ScopeGate",
    "ServerGate",
    "ToolGate",
    "check_path",
    "consent_digest",
    "summarize_arguments",
]
