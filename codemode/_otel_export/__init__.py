"""Turning span export on: the ``otel`` extra's SDK and OTLP exporter, from the standard
OpenTelemetry environment variables.

codemode's commands call :func:`export_from_environment` once at start. When
``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) is set, spans go
to that collector over OTLP/HTTP, batched; the other ``OTEL_*`` variables (headers, service
name, sampler) apply as the SDK defines them. Without the variables nothing is installed and
spans stay no-ops. An application that embeds codemode configures its own provider instead (and
may wrap its exporter with :func:`redacting_exporter` likewise).

Every span is redacted before it is exported (see :mod:`._redacting`): the MCP SDK's spans carry
what servers answered, credentials included.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from codemode.errors import ConfigError

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export import SpanExporter

ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")


def export_from_environment(environ: Mapping[str, str] | None = None) -> bool:
    """Install a tracer provider that exports over OTLP when an endpoint is configured."""
    env = os.environ if environ is None else environ
    if not any(env.get(name) for name in ENDPOINT_VARIABLES):
        return False
    try:
        from opentelemetry import trace
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        from codemode._otel_export._redacting import RedactingSpanExporter
    except ImportError:
        raise ConfigError(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            [("otel", "span export needs the otel extra: pip install 'codemode[otel]'")],
        ) from None
    resource = Resource.create({"service.name": env.get("OTEL_SERVICE_NAME", "codemode")})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(RedactingSpanExporter(OTLPSpanExporter())))
    trace.set_tracer_provider(provider)
    import logging  # here, not at the top: the CLI imports this module on every start

    logging.getLogger("codemode.otel").info("exporting spans over OTLP")
    return True


def redacting_exporter(inner: SpanExporter) -> SpanExporter:
    """``inner`` with secrets hidden in every span it exports (needs the ``otel`` extra)."""
    from codemode._otel_export._redacting import RedactingSpanExporter

    return RedactingSpanExporter(inner)
