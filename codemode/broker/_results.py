"""The result filter: every tool result, and the final result, passes here.

In order: drop content types the policy does not allow, redact secrets, tokenise PII, flag
text that looks like instructions to a model, and cut to the size cap with a visible marker.
Nothing in a result is ever *acted on*: results are data, and a flag only tells the reader.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

import mcp_types

from codemode.broker._pii import PiiVault, map_strings, scrub_text
from codemode.broker._redact import redact_secrets
from codemode.calls import ContentBlock, ToolError, ToolResult
from codemode.config import ResultPolicy

_INJECTION = re.compile(
    r"(?i)\b(?:ignore|disregard|forget)\s+(?:all\s+|any\s+)?(?:the\s+)?(?:previous|prior|above|earlier)\s+"
    r"(?:instructions|prompts?|messages|rules)"
    r"|\byou\s+are\s+now\s+(?:in\s+)?(?:developer|dan|admin)\b"
    r"|\b(?:new|updated)\s+system\s+prompt\b"
    r"|<\s*/?\s*(?:system|assistant)\s*>"
)


@dataclass
class FilterReport:
    truncated: bool = False
    secrets_redacted: int = 0
    pii_tokenized: int = 0
    blocks_dropped: int = 0
    injection_suspected: bool = False
    notes: list[str] = field(default_factory=lambda: [])


class ResultFilter:
    def __init__(self, policy: ResultPolicy, vault: PiiVault) -> None:
        self.policy = policy
        self.vault = vault

    # -- text ------------------------------------------------------------------------------

    def text(self, value: str, report: FilterReport) -> str:
        if self.policy.redact_secrets:
            value, found = redact_secrets(value)
            report.secrets_redacted += found
        if self.policy.pii != "off" and self.policy.pii_kinds:
            if self.policy.pii == "tokenize":
                value, found = scrub_text(value, self.policy.pii_kinds, self.vault.placeholder)
            else:
                value, found = scrub_text(value, self.policy.pii_kinds, lambda kind, _v: f"[REDACTED:{kind}]")
            report.pii_tokenized += found
        if _INJECTION.search(value):
            report.injection_suspected = True
        return value

    def value(self, value: Any, report: FilterReport) -> Any:
        return map_strings(value, lambda s: self.text(s, report))

    # -- tool results ------------------------------------------------------------------------

    def _blocks(self, content: list[mcp_types.ContentBlock], report: FilterReport) -> list[dict[str, Any]]:
        allowed = set(self.policy.content_types)
        blocks: list[dict[str, Any]] = []
        for block in content:
            data = block.model_dump(mode="json", by_alias=True, exclude_none=True)
            kind = str(data.get("type", "unknown"))
            if kind not in allowed:
                report.blocks_dropped += 1
                blocks.append({"type": "text", "text": f"[content of type {kind!r} removed by policy]"})
                continue
            blocks.append(self.value(data, report) if kind in ("text", "resource", "resource_link") else data)
        return blocks

    def _cap(
        self, structured: Any, blocks: list[dict[str, Any]], report: FilterReport
    ) -> tuple[Any, list[dict[str, Any]]]:
        limit = self.policy.max_tool_result_bytes
        size = len(json.dumps([structured, blocks], ensure_ascii=False).encode())
        if size <= limit:
            return structured, blocks
        report.truncated = True
        # Keep a prefix of the text the program would have parsed, with a marker it can see.
        text = (
            json.dumps(structured, ensure_ascii=False)
            if structured is not None
            else "\n".join(str(b.get("text", "")) for b in blocks if b.get("type") == "text")
        )
        marker = f"\n…[truncated by codemode: {size:,} bytes, limit {limit:,}]"
        budget = max(0, limit - len(marker.encode()) - 64)
        cut = text.encode()[:budget].decode("utf-8", "ignore")
        report.notes.append(f"result truncated from {size:,} to {limit:,} bytes")
        return None, [{"type": "text", "text": cut + marker}]

    def tool_result(self, result: mcp_types.CallToolResult) -> tuple[ToolResult | ToolError, FilterReport]:
        report = FilterReport()
        blocks = self._blocks(list(result.content), report)
        structured = (
            self.value(result.structured_content, report) if result.structured_content is not None else None
        )
        structured, blocks = self._cap(structured, blocks, report)
        content = tuple(ContentBlock.model_validate(b) for b in blocks)
        if result.is_error:
            message = " ".join(str(b.get("text", "")) for b in blocks if b.get("type") == "text").strip()
            return ToolError(message=message or "the tool reported an error", content=content), report
        return ToolResult(structured=structured, content=content, truncated=report.truncated), report
