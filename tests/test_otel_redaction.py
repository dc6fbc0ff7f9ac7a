"""Spans leave the process without secrets: codemode's own (a failure recorded redacted) and
anyone else's (the MCP SDK's, whose status is a server's error message), redacted on export."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import cast

import pytest
from mcp.shared._otel import otel_span
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanContext, SpanKind, StatusCode

from codemode import _tracing
from codemode._otel_export import redacting_exporter
from codemode._redaction import forget_secrets, remember_secret

SECRET = "span-secret-8c6976e5b541"


@pytest.fixture
def provider() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    forget_secrets()
    remember_secret(SECRET, "SPAN_SECRET")
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(redacting_exporter(exporter)))
    try:
        yield provider, exporter
    finally:
        provider.shutdown()
        forget_secrets()


def texts(span: ReadableSpan) -> str:
    parts = [span.name, span.status.description or "", repr(dict(span.attributes or {}))]
    parts += [repr(dict(event.attributes or {})) for event in span.events]
    return "\n".join(parts)


def test_another_librarys_span_is_redacted_on_export(
    provider: tuple[TracerProvider, InMemorySpanExporter], monkeypatch: pytest.MonkeyPatch
) -> None:
    tracer_provider, exporter = provider
    monkeypatch.setattr("mcp.shared._otel._tracer", tracer_provider.get_tracer("mcp-python-sdk"))
    contexts: list[SpanContext] = []

    def rotate() -> None:
        with otel_span("MCP send tools/call rotate", kind=SpanKind.CLIENT) as span:
            contexts.append(span.get_span_context())
            span.set_attribute("mcp.error", f"rotation failed for {SECRET}")
            span.set_status(StatusCode.ERROR, f"rotation failed for {SECRET}")
            raise RuntimeError(f"server error -32603: {SECRET}; config: API_KEY=abcd1234efgh5678")

    with pytest.raises(RuntimeError):
        rotate()
    (exported,) = exporter.get_finished_spans()
    shown = texts(exported)
    assert SECRET not in shown and "abcd1234efgh5678" not in shown
    assert "[REDACTED:${SPAN_SECRET}]" in shown and exported.status.status_code is StatusCode.ERROR
    assert exported.context == contexts[0], "the span is the same span, redacted"


def test_a_clean_span_is_exported_as_it_is(provider: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    tracer_provider, exporter = provider
    with tracer_provider.get_tracer("x").start_as_current_span("codemode.run", attributes={"a": "b"}):
        pass
    (exported,) = exporter.get_finished_spans()
    assert isinstance(exported, ReadableSpan) and dict(exported.attributes or {}) == {"a": "b"}


def test_codemodes_spans_record_a_failure_redacted_at_the_source(
    provider: tuple[TracerProvider, InMemorySpanExporter], monkeypatch: pytest.MonkeyPatch
) -> None:
    tracer_provider, _ = provider
    source = InMemorySpanExporter()  # sees spans as made, before the export's redaction
    tracer_provider.add_span_processor(SimpleSpanProcessor(source))
    monkeypatch.setattr(_tracing, "tracer", lambda: tracer_provider.get_tracer(_tracing.TRACER_NAME))

    def fail() -> None:
        with _tracing._span("codemode.run"):  # pyright: ignore[reportPrivateUsage]
            _tracing.note(receipt=f"receipt for {SECRET}")
            raise ValueError(f"program failed with {SECRET}")

    with pytest.raises(ValueError, match="program failed"):
        fail()
    (made,) = source.get_finished_spans()
    shown = texts(made)
    assert SECRET not in shown
    assert (
        made.attributes is not None
        and made.attributes["codemode.receipt"] == "receipt for [REDACTED:${SPAN_SECRET}]"
    )
    assert [event.name for event in made.events] == ["exception"]
    assert made.status.description == "ValueError: program failed with [REDACTED:${SPAN_SECRET}]"


def test_a_secret_in_a_sequence_attribute_is_redacted_on_export() -> None:
    # A sequence attribute's repr escapes quotes and backslashes, so the cheap check must read
    # its items as they are: a remembered value holding both quote kinds was exported in clear.
    quoted = 'it\'s "quoted" 5e8a1f3c'
    forget_secrets()
    remember_secret(quoted, "QUOTED_SECRET")
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(redacting_exporter(exporter)))
    try:
        with provider.get_tracer("x").start_as_current_span("call", attributes={"args": (quoted, "ok")}):
            pass
    finally:
        provider.shutdown()
        forget_secrets()
    (exported,) = exporter.get_finished_spans()
    values = list(cast(Sequence[str], (exported.attributes or {})["args"]))
    assert quoted not in values and values[1] == "ok"
    assert "[REDACTED:${QUOTED_SECRET}]" in values[0]
