"""The result filter: every tool result, and the final result, passes here.

In order: drop content types the policy does not allow, redact secrets, tokenise PII, flag
text that looks like instructions to a model, and cut to the size cap with a visible marker.
Nothing in a result is ever *acted on*: results are data, and a flag only tells the reader.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import mcp_types

from codemode._redaction import (
    any_word_pattern,
    known_secret_in,
    redact_secrets,
    redact_value_counting,
    secret_kinds_in,
)
from codemode.broker._media import media_problem
from codemode.broker._pii import PiiVault, json_scan_text, map_fields, pii_kinds_in, scrub_text
from codemode.calls import ContentBlock, ToolError, ToolResult
from codemode.config import ResultPolicy

_INJECTION = re.compile(
    r"(?i)\b(?:ignore|disregard|forget)\s+(?:all\s+|any\s+)?(?:the\s+)?(?:previous|prior|above|earlier)\s+"
    r"(?:instructions|prompts?|messages|rules)"
    r"|\byou\s+are\s+now\s+(?:in\s+)?(?:developer|dan|admin)\b"
    r"|\b(?:new|updated)\s+system\s+prompt\b"
    r"|<\s*/?\s*(?:system|assistant)\s*>"
)


_to_json = json.JSONEncoder(ensure_ascii=False).encode
"""``json.dumps(value, ensure_ascii=False)`` without building an encoder per call."""

_TEXT_BLOCKS = frozenset({"text", "resource", "resource_link"})
_MEDIA_PAYLOAD = ("data", "mimeType")
"""The fields of an image or audio block left as they are (see :meth:`ResultFilter.block`)."""

_INJECTION_WORDS = any_word_pattern(("ignore", "disregard", "forget", "you", "system", "assistant"))
"""Every alternative of the injection pattern contains one of these (lowercase): a cheap prefilter,
searched in the lowered text."""


def injection_suspected(text: str) -> bool:
    """Instruction-like text aimed at a model (flagged for the reader, never acted upon)."""
    return _INJECTION_WORDS.search(text.lower()) is not None and bool(_INJECTION.search(text))


@dataclass(frozen=True)
class _Plan:
    secrets: set[str]
    pii: set[str]
    injection: bool


@dataclass
class FilterReport:
    truncated: bool = False
    secrets_redacted: int = 0
    pii_tokenized: int = 0
    blocks_dropped: int = 0
    injection_suspected: bool = False

    def as_dict(self) -> dict[str, int | bool]:
        """The counts and flags as a plain dict (cheaper than ``dataclasses.asdict``)."""
        return dict(vars(self))


class ResultFilter:
    def __init__(self, policy: ResultPolicy, vault: PiiVault) -> None:
        self.policy = policy
        self.vault = vault

    # -- text ------------------------------------------------------------------------------

    def _plan(self, text: str, *, fields: bool = False) -> _Plan:
        """Which detectors have anything to do in ``text`` (whole-value scan, one pass each);
        ``fields``: ``text`` is a value's :func:`json_scan_text` (see :func:`pii_kinds_in`), whose
        known secret values :meth:`value` has already hidden (their JSON-escaped forms are known
        too, so its scan of the raw JSON text found every one)."""
        secrets = secret_kinds_in(text, known=not fields) if self.policy.redact_secrets else set[str]()
        pii = (
            pii_kinds_in(text, self.policy.pii_kinds, fields=fields)
            if self.policy.pii != "off" and self.policy.pii_kinds
            else set[str]()
        )
        return _Plan(secrets, pii, injection_suspected(text))

    def _apply(self, value: str, plan: _Plan, report: FilterReport, phone_field: bool = False) -> str:
        if plan.secrets:
            value, found = redact_secrets(value, plan.secrets)
            report.secrets_redacted += found
        if plan.pii:
            if self.policy.pii == "tokenize":
                value, found = scrub_text(value, plan.pii, self.vault.placeholder, phone_field=phone_field)
            else:
                value, found = scrub_text(
                    value, plan.pii, lambda kind, _v: f"[REDACTED:{kind}]", phone_field=phone_field
                )
            report.pii_tokenized += found
        return value

    def text(self, value: str, report: FilterReport) -> str:
        plan = self._plan(value)
        report.injection_suspected |= plan.injection
        return self._apply(value, plan, report) if plan.secrets or plan.pii else value

    def value(self, value: Any, report: FilterReport) -> Any:
        """Filter every string inside a JSON value.

        The detectors first scan the value's JSON text as a whole, its escapes decoded; only
        detectors that found something then visit the individual strings, which decide. A
        1,000-row result without secrets or PII costs a few regex passes instead of thousands.
        The whole-text scan finds whatever a string holds (see :func:`json_scan_text`); on the
        raw JSON text it would not: ``"Card:\\n4111..."`` has an ``n`` before the number there.
        Secret shapes need no decoding: the walk below visits each string whenever the raw text
        holds a trigger word, and no trigger word holds a character that JSON escapes.
        """
        if value is None or isinstance(value, bool | int | float):
            return value
        if isinstance(value, str):
            return self.text(value, report)
        text = _to_json(value)
        if self.policy.redact_secrets:
            # Field names and name/value pairs mark secrets that no pattern over the text can see.
            value, found = redact_value_counting(value, text)
            if found:
                report.secrets_redacted += found
                text = _to_json(value)
        plan = self._plan(json_scan_text(text), fields=True)
        report.injection_suspected |= plan.injection
        if not plan.secrets and not plan.pii:
            return value
        return map_fields(value, lambda s, phone_field: self._apply(s, plan, report, phone_field))

    def block(self, data: dict[str, Any], report: FilterReport) -> dict[str, Any]:
        """Filter one content block in wire shape.

        An image or audio block keeps its base64 ``data`` (a pattern found in it is noise, and a
        rewrite would break the file) and its ``mimeType`` (already checked against the policy);
        its other fields (``_meta``, ``annotations``) are filtered like any value: a server can
        put a credential there as easily as in a text block. A configured secret's value in the
        ``data`` is no noise (the remembered forms include its base64 at every offset): the block
        is replaced by a note, whole, since a rewrite would break the file.
        """
        if data.get("type") in _TEXT_BLOCKS:
            return self.value(data, report)
        if self.policy.redact_secrets and known_secret_in(str(data.get("data", ""))):
            report.secrets_redacted += 1
            kind = str(data.get("type"))
            return {"type": "text", "text": f"[{kind} content removed: it holds a configured secret]"}
        rest = {key: item for key, item in data.items() if key not in _MEDIA_PAYLOAD}
        if rest.keys() <= {"type"}:
            return data
        kept = {key: data[key] for key in _MEDIA_PAYLOAD if key in data}
        return {**self.value(rest, report), **kept}

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
            problem = media_problem(data, self.policy.mime_types)
            if problem is not None:
                report.blocks_dropped += 1
                blocks.append({"type": "text", "text": f"[{problem}: removed by policy]"})
                continue
            blocks.append(self.block(data, report))
        return blocks

    def _cap(
        self, structured: Any, blocks: list[dict[str, Any]], report: FilterReport
    ) -> tuple[Any, list[dict[str, Any]]]:
        limit = self.policy.max_tool_result_bytes
        size = len(_to_json([structured, blocks]).encode())
        if size <= limit:
            return structured, blocks
        report.truncated = True
        # Keep a prefix of the text the program would have parsed, with a marker it can see.
        text = (
            _to_json(structured)
            if structured is not None
            else "\n".join(str(b.get("text", "")) for b in blocks if b.get("type") == "text")
        )
        marker = f"\n…[truncated by codemode: {size:,} bytes, limit {limit:,}]"
        budget = max(0, limit - len(marker.encode()) - 64)
        cut = text.encode()[:budget].decode("utf-8", "ignore")
        return None, [{"type": "text", "text": cut + marker}]

    def tool_result(
        self, result: mcp_types.CallToolResult, content: list[mcp_types.ContentBlock] | None = None
    ) -> tuple[ToolResult | ToolError, FilterReport]:
        """Filter ``result``; ``content`` is its :func:`unique_content`, when the caller has it."""
        report = FilterReport()
        blocks = self._blocks(unique_content(result) if content is None else content, report)
        structured = (
            self.value(result.structured_content, report) if result.structured_content is not None else None
        )
        structured, blocks = self._cap(structured, blocks, report)
        kept = tuple(ContentBlock.model_validate(b) for b in blocks)
        if result.is_error:
            message = " ".join(str(b.get("text", "")) for b in blocks if b.get("type") == "text").strip()
            return ToolError(message=message or "the tool reported an error", content=kept), report
        return ToolResult(structured=structured, content=kept, truncated=report.truncated), report


def unique_content(result: mcp_types.CallToolResult) -> list[mcp_types.ContentBlock]:
    """The result's content blocks without the JSON text copy of its structured content.

    Servers repeat ``structuredContent`` as JSON text for old clients; the program gets the
    structured value, so the copy is dropped before it costs filtering and transfer.
    """
    if result.structured_content is None or result.is_error:
        return list(result.content)
    return [b for b in result.content if not _duplicates(b, result.structured_content)]


def _duplicates(block: mcp_types.ContentBlock, structured: Any) -> bool:
    if not isinstance(block, mcp_types.TextContent) or not block.text.lstrip().startswith(("{", "[")):
        return False
    try:
        return bool(json.loads(block.text) == structured)
    except ValueError:
        return False
