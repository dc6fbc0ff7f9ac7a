"""Secrets hidden in spans on their way out, whoever made the span.

codemode's own spans carry no argument values and redact what a server wrote (see
:mod:`codemode._tracing`), but they are not the only spans in the process: the MCP SDK makes one
per request it sends, with a server's JSON-RPC error message as its status and an exception's
message as an event. :class:`RedactingSpanExporter` wraps the exporter and hides secrets in every
span's name, attributes, events, links and status before it leaves. It needs the ``otel`` extra
(the SDK), so the package imports it only once the SDK is known to be there.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.trace import Link, Status

from codemode._redaction import might_hold_secrets, redact_secrets


class RedactingSpanExporter(SpanExporter):
    """``inner`` with every span's texts redacted first (a span with nothing to hide is passed
    on as it is)."""

    def __init__(self, inner: SpanExporter) -> None:
        self.inner = inner

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return self.inner.export([redacted_span(span) for span in spans])

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


def redacted_span(span: ReadableSpan) -> ReadableSpan:
    """``span`` with secrets hidden in its name, attributes, events, links and status."""
    if not might_hold_secrets(_texts(span)):
        return span
    status = span.status
    return ReadableSpan(
        name=_text(span.name),
        context=span.context,
        parent=span.parent,
        resource=span.resource,
        attributes=_attributes(span.attributes),
        events=[Event(event.name, _attributes(event.attributes), event.timestamp) for event in span.events],
        links=[Link(link.context, _attributes(link.attributes)) for link in span.links],
        kind=span.kind,
        status=Status(status.status_code, _text(status.description) if status.description else None),
        start_time=span.start_time,
        end_time=span.end_time,
        instrumentation_scope=span.instrumentation_scope,
    )


def _texts(span: ReadableSpan) -> str:
    """Every text of ``span``, joined, for the cheap test."""
    parts = [span.name, span.status.description or ""]
    for attributes in (
        span.attributes,
        *(event.attributes for event in span.events),
        *(link.attributes for link in span.links),
    ):
        for value in (attributes or {}).values():
            # A sequence's items as they are: its repr escapes quotes and backslashes, and a
            # remembered value would not be found in that form.
            if isinstance(value, Sequence) and not isinstance(value, str | bytes):
                parts.extend(str(item) for item in value)
            else:
                parts.append(str(value))
    return "\n".join(parts)


def _text(value: str) -> str:
    return redact_secrets(value)[0]


def _attributes(attributes: Mapping[str, Any] | None) -> dict[str, Any]:
    return {key: _value(value) for key, value in (attributes or {}).items()}


def _value(value: Any) -> Any:
    if isinstance(value, str):
        return _text(value)
    if isinstance(value, Sequence) and not isinstance(value, bytes):
        return tuple(_value(item) for item in value)  # pyright: ignore[reportUnknownVariableType]
    return value
