"""Rows of the derived tables as the value types the ledger returns."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, cast

from codemode.ledger._models import ApprovalRecord, CallRecord, CallState, RunRecord, SessionBinding
from codemode.ledger._reduce import Row
from codemode.ledger._time import from_text


def opt_time(text: str | int | None) -> datetime | None:
    return None if text is None else from_text(str(text))


def _json_or_none(text: str | int | None) -> Any:
    return None if text is None else json.loads(str(text))


def call_record(row: Row) -> CallRecord:
    return CallRecord(
        call_id=str(row["call_id"]),
        run_id=str(row["run_id"]),
        attempt=cast("int | None", row["attempt"]),
        trace_id=str(row["trace_id"]),
        principal=str(row["principal"]),
        tenant=str(row["tenant"]),
        server=str(row["server"]),
        tool=str(row["tool"]),
        schema_hash=str(row["schema_hash"]),
        tool_version=cast("str | None", row["tool_version"]),
        idempotency_key=cast("str | None", row["idem_key"]),
        args_digest=str(row["args_digest"]),
        arguments=_json_or_none(row["args_json"]),
        resource_scope=cast("str | None", row["resource_scope"]),
        approval_id=cast("str | None", row["approval_id"]),
        state=cast(CallState, row["state"]),
        gate=cast("str | None", row["gate"]),
        reason=cast("str | None", row["reason"]),
        replay_of=cast("str | None", row["replay_of"]),
        owner=cast("str | None", row["owner"]),
        lease_expires_at=opt_time(row["lease_expires_at"]),
        created_at=from_text(str(row["created_at"])),
        sent_at=opt_time(row["sent_at"]),
        completed_at=opt_time(row["completed_at"]),
        outcome_kind=cast("str | None", row["outcome_kind"]),
        result=_json_or_none(row["result_json"]),
        result_digest=cast("str | None", row["result_digest"]),
        result_bytes=cast("int | None", row["result_bytes"]),
        result_truncated=bool(row["result_truncated"]),
        filter_report=_json_or_none(row["filter_json"]),
        inputs=_json_or_none(row["inputs_json"]) or [],
        receipt=cast("str | None", row["receipt"]),
        retry_after=opt_time(row["retry_after"]),
        evidence=cast("str | None", row["evidence"]),
        resolved_by=cast("str | None", row["resolved_by"]),
        updated_at=from_text(str(row["updated_at"])),
        skill=cast("str | None", row["skill"]),
        compensates=cast("str | None", row.get("compensates")),
    )


def run_record(row: Row) -> RunRecord:
    return RunRecord(
        run_id=str(row["run_id"]),
        principal=str(row["principal"]),
        tenant=str(row["tenant"]),
        trace_id=str(row["trace_id"]),
        session_id=cast("str | None", row["session_id"]),
        code_digest=str(row["code_digest"]),
        status=str(row["status"]),
        summary=_json_or_none(row["summary_json"]),
        owner=cast("str | None", row["owner"]),
        started_at=from_text(str(row["started_at"])),
        finished_at=opt_time(row["finished_at"]),
    )


def approval_record(row: Row) -> ApprovalRecord:
    return ApprovalRecord(
        approval_id=str(row["approval_id"]),
        tenant=str(row["tenant"]),
        principal=str(row["principal"]),
        server=str(row["server"]),
        tool=str(row["tool"]),
        args_digest=str(row["args_digest"]),
        risk=str(row["risk"]),
        call_id=cast("str | None", row["call_id"]),
        approver=str(row["approver"]),
        issued_at=from_text(str(row["issued_at"])),
        expires_at=from_text(str(row["expires_at"])),
        note=cast("str | None", row["note"]),
        used_at=opt_time(row["used_at"]),
        used_by_call=cast("str | None", row["used_by_call"]),
    )


def session_binding(row: Row) -> SessionBinding:
    return SessionBinding(
        session_digest=str(row["session_digest"]),
        principal=str(row["principal"]),
        tenant=str(row["tenant"]),
        owner=str(row["owner"]),
        bound_at=from_text(str(row["bound_at"])),
    )
