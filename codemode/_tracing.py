"""OpenTelemetry spans: one per run, and a child per tool call, carrying the evidence chain.

codemode depends only on ``opentelemetry-api``. Until the application installs an SDK (the
``otel`` extra: ``opentelemetry-sdk`` and an exporter), every span is a no-op that costs little.

Span attributes are the chain that acceptance asks for (principal and tenant, server and its
version, tool, schema hash, argument digest, approval, receipt, the gate decision, the ledger's
call id and the outcome), never argument values or results, which may hold secrets and PII.

Tool calls arrive on the sandbox channel's tasks, which do not run inside the run's context, so
the run span is kept per run id and each call span is parented on it explicitly. The caller's
W3C ``traceparent`` (from a ``codemode serve`` request) becomes the run span's parent, and each
call's context is passed on to the downstream server in ``_meta``, as the MCP trace-context
convention describes.

Text a server or a program wrote still reaches a span: a receipt, an exception's message. Those
values are redacted here (:func:`codemode._redaction.redact_secrets`), and codemode's spans
record a failure themselves, redacted, instead of letting OpenTelemetry record the raw message.
Spans made by others (the MCP SDK's, with a server's error message as their status) are
redacted on export (:func:`codemode._otel_export.redacting_exporter`).
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Callable, Generator, Mapping
from typing import Any, Protocol

from opentelemetry import propagate, trace
from opentelemetry.trace import Span, Status, StatusCode, format_trace_id

from codemode._redaction import redact_secrets
from codemode._run_usage import RunUsage
from codemode.calls import CallDenied, CallFailed, CallOutcome, RunBinding, ToolCallRequest, ToolError

TRACER_NAME = "codemode"
_run_spans: dict[str, Span] = {}


def tracer() -> trace.Tracer:
    # Looked up on each use, so a provider installed after import (by the application) applies.
    return trace.get_tracer(TRACER_NAME)


@contextlib.contextmanager
def run_span(
    bind: Callable[[str], RunBinding], *, traceparent: str | None = None
) -> Generator[tuple[Span, RunBinding]]:
    """The span of one run, current inside the block, and the parent of its call spans.

    ``bind(trace_id)`` makes the run's binding once the span exists, so that the ledger records
    the run under its W3C trace id: the one an operator's tracing system shows, whether the
    trace is the caller's (``traceparent``) or began here. With no SDK and no caller the span
    is invalid, and the id is a fresh random one in the same format.
    """
    parent = propagate.extract({"traceparent": traceparent}) if traceparent else None
    with _span("codemode.run", context=parent) as span:
        context = span.get_span_context()
        binding = bind(format_trace_id(context.trace_id) if context.is_valid else secrets.token_hex(16))
        span.set_attributes(
            {
                "codemode.run_id": binding.run_id,
                "codemode.trace_id": binding.trace_id,
                "codemode.principal": binding.principal,
                "codemode.tenant": binding.tenant,
            }
        )
        _run_spans[binding.run_id] = span
        try:
            yield span, binding
        finally:
            _run_spans.pop(binding.run_id, None)


@contextlib.contextmanager
def call_span(binding: RunBinding, request: ToolCallRequest) -> Generator[Span]:
    """The span of one tool call, a child of its run's span, current inside the block."""
    run = _run_spans.get(binding.run_id)
    if isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        # No SDK installed: a call span would only be a non-recording copy of its parent's
        # context. The run's span stands in for it (its context is what goes downstream), which
        # saves building one on every call.
        with trace.use_span(run if run is not None else trace.INVALID_SPAN, end_on_exit=False) as span:
            yield span
        return
    parent = trace.set_span_in_context(run) if run is not None else None
    attributes = {
        "codemode.run_id": binding.run_id,
        "codemode.principal": binding.principal,
        "codemode.tenant": binding.tenant,
        "mcp.server": request.server,
        "mcp.tool": request.tool,
        "codemode.schema_hash": request.schema_hash,
    }
    name = f"codemode.tool_call {request.server}/{request.tool}"
    with _span(name, context=parent, attributes=attributes) as span:
        yield span


@contextlib.contextmanager
def _span(name: str, **options: Any) -> Generator[Span]:
    """A current span that records an exception leaving it with its message redacted (the
    default would record ``str(exc)`` as it is, and a server's words can be in it)."""
    with tracer().start_as_current_span(
        name, record_exception=False, set_status_on_exception=False, **options
    ) as span:
        try:
            yield span
        except Exception as exc:
            if span.is_recording():
                message = redact_secrets(str(exc))[0]
                kind = type(exc).__qualname__
                span.add_event("exception", {"exception.type": kind, "exception.message": message})
                span.set_status(Status(StatusCode.ERROR, f"{kind}: {message}"))
            raise


def note(**attributes: str | None) -> None:
    """Add chain attributes to the current call span (None values are left out). A value may
    come from a server (a receipt): its secrets are hidden."""
    span = trace.get_current_span()
    if not span.is_recording():
        return
    for key, value in attributes.items():
        if value is not None:
            span.set_attribute(f"codemode.{key}", redact_secrets(value)[0])


class IntentView(Protocol):
    """What a call span shows of the ledger's intent record. Tracing sits below the ledger, so
    it names only the fields it reads; the ledger's ``CallIntent`` has them."""

    @property
    def call_id(self) -> str: ...
    @property
    def approval_id(self) -> str | None: ...
    @property
    def tool_version(self) -> str | None: ...


def note_intent(intent: IntentView, args_digest: Callable[[], str]) -> None:
    """The ledger's view of the call on its span. The argument digest costs a canonical dump
    and a hash, so the caller passes how to make it, and it is made only when the span is
    recorded (an SDK is installed)."""
    if trace.get_current_span().is_recording():
        note(
            call_id=intent.call_id,
            args_digest=args_digest(),
            approval_id=intent.approval_id,
            tool_version=intent.tool_version,
        )


def note_filtering(report: Mapping[str, int | bool]) -> None:
    """What the result filter changed (counts and flags), as ``codemode.filter.*`` attributes."""
    span = trace.get_current_span()
    if span.is_recording():
        span.set_attributes({f"codemode.filter.{key}": value for key, value in report.items()})


def finish_call(span: Span, outcome: CallOutcome) -> None:
    """The gate decision and the outcome kind; a denial or failure marks the span as an error."""
    span.set_attribute("codemode.outcome", outcome.kind)
    if isinstance(outcome, CallDenied):
        span.set_attribute("codemode.decision", "denied")
        span.set_attribute("codemode.gate", outcome.gate)
        span.set_status(Status(StatusCode.ERROR, f"denied by the {outcome.gate} gate"))
        return
    span.set_attribute("codemode.decision", "allowed")
    if isinstance(outcome, CallFailed | ToolError):
        span.set_status(Status(StatusCode.ERROR, outcome.kind))


def note_run_usage(span: Span, usage: RunUsage | None, broker_cpu_s: float | None) -> None:
    """What the run cost the machine, as ``codemode.usage.*`` attributes on its span (a number
    that could not be measured is left out, not set to zero)."""
    if not span.is_recording():
        return
    attributes: dict[str, float | int | str] = {}
    if usage is not None:
        measured = {
            "cpu_s": usage.cpu_s,
            "peak_mb": usage.peak_mb,
            "channel_in_bytes": usage.channel_in_bytes,
            "channel_out_bytes": usage.channel_out_bytes,
            "cap_hit": usage.cap_hit,
        }
        attributes.update(
            {f"codemode.usage.{key}": value for key, value in measured.items() if value is not None}
        )
    if broker_cpu_s is not None:
        attributes["codemode.usage.broker_cpu_s"] = broker_cpu_s
    span.set_attributes(attributes)


def downstream_meta(meta: Mapping[str, Any]) -> dict[str, Any]:
    """``meta`` plus the current span's ``traceparent`` (and ``tracestate``), for the server."""
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return {**meta, **carrier}
