"""The broker: the deterministic control plane between the sandbox and the MCP servers.

Every call from a program passes the gates (principal, tool identity, arguments, resource
scope, consent, budget), the operation ledger (idempotency, execution record) and the result
filter (size, content types, secrets, PII, instruction-like text flagged as data).
"""

from codemode._redaction import redact_secrets
from codemode.broker._approvals import (
    ApprovalAnswer,
    ApprovalRequest,
    Approver,
    CallbackApprover,
    TerminalApprover,
)
from codemode.broker._broker import Broker, RunSummary, ToolBackend
from codemode.broker._decisions import Allow, Decision, Deny, NeedsApproval
from codemode.broker._pii import PiiVault
from codemode.broker._results import FilterReport, ResultFilter
from codemode.broker._terminal import terminal_available
from codemode.broker.gates import ApprovalStore, CatalogView

__all__ = [
    "Allow",
    "ApprovalAnswer",
    "ApprovalRequest",
    "ApprovalStore",
    "Approver",
    "Broker",
    "CallbackApprover",
    "CatalogView",
    "Decision",
    "Deny",
    "FilterReport",
    "NeedsApproval",
    "PiiVault",
    "ResultFilter",
    "RunSummary",
    "TerminalApprover",
    "ToolBackend",
    "redact_secrets",
    "terminal_available",
]
