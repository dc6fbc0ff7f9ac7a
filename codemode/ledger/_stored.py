"""What the ledger keeps of a call's arguments, its outcome and a run's summary.

Secrets never reach the file (or its events, which carry the same fields): arguments, results
and summaries are stored with :func:`codemode._redaction.redact_value` applied, while the
digests are taken over the real values, so approvals and idempotency keys still bind exactly
what was sent and received. A replay returns the stored (redacted) outcome: the broker stores
results redacted anyway, so that is what the first caller saw too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from codemode._redaction import redact_value_counting
from codemode.calls import CallFailed, ContentBlock, ToolError, ToolResult
from codemode.catalog import canonical_json
from codemode.ledger._context import stored_text
from codemode.ledger._digest import canonical_arguments, sha256_text
from codemode.ledger._models import Completion


def _redacted_json(value: Any, canonical: bytes) -> str:
    """``canonical`` (the canonical JSON of ``value``) with secrets hidden. The cheap test reads
    ``canonical`` itself rather than a second dump of ``value``."""
    text = canonical.decode("utf-8")
    redacted, hidden = redact_value_counting(value, text)
    return canonical_json(redacted).decode("utf-8") if hidden else text


def stored_arguments(arguments: dict[str, Any], *, keep: bool) -> tuple[str, str | None]:
    """``(digest of the real arguments, the JSON stored)``; with ``keep=False`` only the digest."""
    canonical = canonical_arguments(arguments)
    digest = sha256_text(canonical)
    return digest, (_redacted_json(arguments, canonical) if keep else None)


def stored_summary(summary: Mapping[str, Any] | None) -> str | None:
    if summary is None:
        return None
    value = dict(summary)
    return _redacted_json(value, canonical_json(value))


def stored_outcome(outcome: Completion, max_bytes: int) -> dict[str, Any]:
    """The columns that record an outcome: kind, digest and size of the real answer, its JSON
    (redacted), or a stand-in naming the digest when it is larger than ``max_bytes``."""
    dumped = outcome.model_dump(mode="json")
    full = canonical_json(dumped)
    fields: dict[str, Any] = {
        "outcome_kind": outcome.kind,
        "result_digest": sha256_text(full),
        "result_bytes": len(full),
        "result_truncated": 0,
    }
    if len(full) <= max_bytes:
        fields["result_json"] = _redacted_json(dumped, full)
        return fields
    # Too large to keep: keep its digest and size, and a stand-in that a replay returns.
    note = (
        f"[result of {len(full)} bytes exceeded the ledger cap of {max_bytes} bytes; "
        f"{fields['result_digest']}]"
    )
    stand_in: Completion
    if isinstance(outcome, ToolResult):
        block = ContentBlock.model_validate({"type": "text", "text": note})
        stand_in = ToolResult(content=(block,), truncated=True)
    elif isinstance(outcome, ToolError):
        stand_in = ToolError(message=stored_text(outcome.message, 4000) + " " + note)
    else:
        stand_in = CallFailed(reason=stored_text(outcome.reason, 4000) + " " + note)
    fields["result_json"] = canonical_json(stand_in.model_dump(mode="json")).decode("utf-8")
    fields["result_truncated"] = 1
    return fields
