"""The broker: the deterministic control plane between the sandbox and the MCP servers.

Every call from a program passes the gates (principal, tool identity, arguments, resource
scope, consent, budget), the operation ledger (idempotency, execution record) and the result
filter (size, content types, secrets, PII, instruction-like text flagged as data).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from codemode._lazy import lazy_exports

_EXPORTS = {
    "Allow": "codemode.broker._decisions",
    "ApprovalAnswer": "codemode.broker._approvals",
    "ApprovalRequest": "codemode.broker._approvals",
    "ApprovalStore": "codemode.broker.gates",
    "Approver": "codemode.broker._approvals",
    "ApprovedPlan": "codemode.broker._approved_plan",
    "Broker": "codemode.broker._broker",
    "CallbackApprover": "codemode.broker._approvals",
    "CallbackElicitor": "codemode.broker._inputs",
    "CatalogView": "codemode.broker.gates",
    "Decision": "codemode.broker._decisions",
    "Deny": "codemode.broker._decisions",
    "ElicitationAnswer": "codemode.broker._inputs",
    "ElicitationRequest": "codemode.broker._inputs",
    "Elicitor": "codemode.broker._inputs",
    "CallbackSampler": "codemode.broker._inputs",
    "RefusingSampler": "codemode.broker._inputs",
    "Sampler": "codemode.broker._inputs",
    "SamplingAnswer": "codemode.broker._inputs",
    "SamplingRequest": "codemode.broker._inputs",
    "FilterReport": "codemode.broker._results",
    "NeedsApproval": "codemode.broker._decisions",
    "PiiVault": "codemode.broker._pii",
    "PlannedCall": "codemode.broker._planning",
    "PlannedRead": "codemode.broker._planning",
    "Planner": "codemode.broker._planning",
    "ResultFilter": "codemode.broker._results",
    "RunEnd": "codemode.broker._run",
    "RunLimits": "codemode.broker._run",
    "RunOutput": "codemode.broker._run",
    "RunScope": "codemode.broker._run",
    "RunState": "codemode.broker._run",
    "RunSummary": "codemode.broker._run",
    "TerminalApprover": "codemode.broker._approvals",
    "TerminalElicitor": "codemode.broker._terminal_form",
    "ToolBackend": "codemode.broker._backend",
    "consent_digest": "codemode.broker.gates",
    "may_see_server": "codemode.broker._visibility",
    "reads_visible_to": "codemode.broker._visibility",
    "redact_secrets": "codemode._redaction",
    "summarize_arguments": "codemode.broker.gates",
    "terminal_available": "codemode.broker._terminal",
    "tool_risk": "codemode.broker._risk",
    "visible_to": "codemode.broker._visibility",
}

__all__, __getattr__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:
    from codemode._redaction import redact_secrets as redact_secrets
    from codemode.broker._approvals import ApprovalAnswer as ApprovalAnswer
    from codemode.broker._approvals import ApprovalRequest as ApprovalRequest
    from codemode.broker._approvals import Approver as Approver
    from codemode.broker._approvals import CallbackApprover as CallbackApprover
    from codemode.broker._approvals import TerminalApprover as TerminalApprover
    from codemode.broker._approved_plan import ApprovedPlan as ApprovedPlan
    from codemode.broker._backend import ToolBackend as ToolBackend
    from codemode.broker._broker import Broker as Broker
    from codemode.broker._decisions import Allow as Allow
    from codemode.broker._decisions import Decision as Decision
    from codemode.broker._decisions import Deny as Deny
    from codemode.broker._decisions import NeedsApproval as NeedsApproval
    from codemode.broker._inputs import CallbackElicitor as CallbackElicitor
    from codemode.broker._inputs import CallbackSampler as CallbackSampler
    from codemode.broker._inputs import ElicitationAnswer as ElicitationAnswer
    from codemode.broker._inputs import ElicitationRequest as ElicitationRequest
    from codemode.broker._inputs import Elicitor as Elicitor
    from codemode.broker._inputs import RefusingSampler as RefusingSampler
    from codemode.broker._inputs import Sampler as Sampler
    from codemode.broker._inputs import SamplingAnswer as SamplingAnswer
    from codemode.broker._inputs import SamplingRequest as SamplingRequest
    from codemode.broker._pii import PiiVault as PiiVault
    from codemode.broker._planning import PlannedCall as PlannedCall
    from codemode.broker._planning import PlannedRead as PlannedRead
    from codemode.broker._planning import Planner as Planner
    from codemode.broker._results import FilterReport as FilterReport
    from codemode.broker._results import ResultFilter as ResultFilter
    from codemode.broker._risk import tool_risk as tool_risk
    from codemode.broker._run import RunEnd as RunEnd
    from codemode.broker._run import RunLimits as RunLimits
    from codemode.broker._run import RunOutput as RunOutput
    from codemode.broker._run import RunScope as RunScope
    from codemode.broker._run import RunState as RunState
    from codemode.broker._run import RunSummary as RunSummary
    from codemode.broker._terminal import terminal_available as terminal_available
    from codemode.broker._terminal_form import TerminalElicitor as TerminalElicitor
    from codemode.broker._visibility import may_see_server as may_see_server
    from codemode.broker._visibility import reads_visible_to as reads_visible_to
    from codemode.broker._visibility import visible_to as visible_to
    from codemode.broker.gates import ApprovalStore as ApprovalStore
    from codemode.broker.gates import CatalogView as CatalogView
    from codemode.broker.gates import consent_digest as consent_digest
    from codemode.broker.gates import summarize_arguments as summarize_arguments
