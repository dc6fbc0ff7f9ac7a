"""The engine: one run wired together, from the config to the final result.

``CodeMode`` connects the MCP host, renders the stubs, starts sandboxes, and puts every call of a
run through the broker and the ledger. ``dispatch`` and ``definitions`` serve its single
``run_code`` tool (and ``search_tools``, ``list_files``, ``read_file``) to a model. Names load on
first use (see ``codemode._lazy``), so importing a result type costs nothing of the engine.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from codemode._lazy import lazy_exports

_EXPORTS = {
    "CodeMode": "codemode.engine._engine",
    "CompensationReport": "codemode.engine._compensate",
    "Effect": "codemode.engine._compensate",
    "RunVerdict": "codemode.engine._compensate",
    "compensate_run": "codemode.engine._compensate",
    "recorded_outcome": "codemode.engine._compensate",
    "undo_standing": "codemode.engine._compensate",
    "declared_rule": "codemode.engine._compensation_check",
    "HostCatalog": "codemode.engine._adapters",
    "LIST_DESCRIPTION": "codemode.engine._tools",
    "LedgerApprovals": "codemode.engine._adapters",
    "Plan": "codemode.engine._plans",
    "awaits_approval": "codemode.engine._plans",
    "record_plan_approval": "codemode.engine._plans",
    "ProgressCallback": "codemode.engine._progress",
    "READ_DESCRIPTION": "codemode.engine._tools",
    "RUN_CODE_DESCRIPTION": "codemode.engine._tools",
    "RunErrorInfo": "codemode.engine._run_result",
    "RunResult": "codemode.engine._run_result",
    "RunUsage": "codemode._run_usage",
    "SEARCH_DESCRIPTION": "codemode.engine._tools",
    "ServerDown": "codemode.engine._down",
    "ToolFormat": "codemode.engine._tools",
    "ToolReply": "codemode.engine._tools",
    "definitions": "codemode.engine._tools",
    "dispatch": "codemode.engine._tools",
    "check_result": "codemode.engine._verify",
    "render_definition": "codemode.engine._tools",
    "run_summary": "codemode.engine._tools",
    "section_boundary": "codemode.engine._run_result",
    "section_marker": "codemode.engine._run_result",
    "server_index_line": "codemode.engine._tools",
    "shown_names": "codemode.engine._workspace",
}

__all__, __getattr__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:
    from codemode._run_usage import RunUsage as RunUsage
    from codemode.engine._adapters import HostCatalog as HostCatalog
    from codemode.engine._adapters import LedgerApprovals as LedgerApprovals
    from codemode.engine._compensate import CompensationReport as CompensationReport
    from codemode.engine._compensate import Effect as Effect
    from codemode.engine._compensate import RunVerdict as RunVerdict
    from codemode.engine._compensate import compensate_run as compensate_run
    from codemode.engine._compensate import recorded_outcome as recorded_outcome
    from codemode.engine._compensate import undo_standing as undo_standing
    from codemode.engine._compensation_check import declared_rule as declared_rule
    from codemode.engine._down import ServerDown as ServerDown
    from codemode.engine._engine import CodeMode as CodeMode
    from codemode.engine._plans import Plan as Plan
    from codemode.engine._plans import awaits_approval as awaits_approval
    from codemode.engine._plans import record_plan_approval as record_plan_approval
    from codemode.engine._progress import ProgressCallback as ProgressCallback
    from codemode.engine._run_result import RunErrorInfo as RunErrorInfo
    from codemode.engine._run_result import RunResult as RunResult
    from codemode.engine._run_result import section_boundary as section_boundary
    from codemode.engine._run_result import section_marker as section_marker
    from codemode.engine._tools import LIST_DESCRIPTION as LIST_DESCRIPTION
    from codemode.engine._tools import READ_DESCRIPTION as READ_DESCRIPTION
    from codemode.engine._tools import RUN_CODE_DESCRIPTION as RUN_CODE_DESCRIPTION
    from codemode.engine._tools import SEARCH_DESCRIPTION as SEARCH_DESCRIPTION
    from codemode.engine._tools import ToolFormat as ToolFormat
    from codemode.engine._tools import ToolReply as ToolReply
    from codemode.engine._tools import definitions as definitions
    from codemode.engine._tools import dispatch as dispatch
    from codemode.engine._tools import render_definition as render_definition
    from codemode.engine._tools import run_summary as run_summary
    from codemode.engine._tools import server_index_line as server_index_line
    from codemode.engine._verify import check_result as check_result
    from codemode.engine._workspace import shown_names as shown_names
