"""The broker's gates: each a small unit that allows, denies with a reason, or asks for approval.

Order (DESIGN.md §4): principal → tool identity → arguments → resource scope → consent → budget;
side effects (idempotency, ledger), the MCP call and the result filter follow in the broker.
"""

from codemode.broker.gates._arguments import ArgumentGate
from codemode.broker.gates._budget import BudgetGate
from codemode.broker.gates._consent import ApprovalStore, ConsentGate
from codemode.broker.gates._principal import PrincipalGate
from codemode.broker.gates._scope import ScopeGate, check_path
from codemode.broker.gates._tool import CatalogView, ToolGate

__all__ = [
    "ApprovalStore",
    "ArgumentGate",
    "BudgetGate",
    "CatalogView",
    "ConsentGate",
    "PrincipalGate",
    "ScopeGate",
    "ToolGate",
    "check_path",
]
