"""OpenTelemetry: one trace per run, a child span per tool call with the evidence chain and no
argument values, the caller's traceparent as the parent, and the call's context passed on to
the downstream server in ``_meta``."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest
from mcp.server.mcpserver import Context, MCPServer
from mcp_types import ToolAnnotations
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from codemode import CodeMode, config_from_mapping
from codemode.catalog import save_lock
from codemode.host import McpHost
from codemode.testing import approved_pins, in_memory_transports

pytestmark = pytest.mark.anyio

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_SPAN = "00f067aa0ba902b7"
SECRET_ARGUMENT = "CUST-SECRET-7"
EXPORTER = InMemorySpanExporter()


@pytest.fixture(scope="module", autouse=True)
def tracer_provider() -> None:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
    trace.set_tracer_provider(provider)  # once per process; later calls are ignored with a warning


def traced_crm(seen: list[str | None]) -> MCPServer:
    app = MCPServer("crm")

    @app.tool(annotations=ToolAnnotations(read_only_hint=True))
    def get_customer(customer_id: str, ctx: Context) -> dict[str, str]:
        """Look up one customer."""
        meta = cast(dict[str, Any] | None, ctx.request_context.meta)
        seen.append(None if meta is None else meta.get("traceparent"))
        return {"id": customer_id, "name": "Acme"}

    @app.tool()
    def delete_customer(customer_id: str) -> str:
        """Delete a customer."""
        return f"deleted {customer_id}"

    return app


async def test_a_run_is_one_trace_with_a_span_per_call_and_no_argument_values(tmp_path: Path) -> None:
    seen: list[str | None] = []
    config = config_from_mapping(
        {
            "servers": {"crm": {"command": "not-a-real-command", "trusted": True}},
            "sandbox": {"backend": "process", "pool_size": 0},
        },
        base_dir=tmp_path,
    )
    transports = in_memory_transports({"crm": traced_crm(seen)})
    async with McpHost(config, transports=transports) as host:
        save_lock(config.lock_path, approved_pins(host.catalogs()).lock)
    program = (
        "from servers.crm import get_customer, delete_customer\n"
        f"get_customer(customer_id={SECRET_ARGUMENT!r})\n"
        f"get_customer(customer_id={SECRET_ARGUMENT!r})\n"
        "try:\n"
        f"    delete_customer(customer_id={SECRET_ARGUMENT!r})\n"
        "except Exception as exc:\n"
        "    pass\n"
        "'done'\n"
    )
    EXPORTER.clear()
    async with CodeMode(config, transports=transports) as engine:
        result = await engine.run(program, traceparent=f"00-{TRACE_ID}-{PARENT_SPAN}-01")
    assert result.status == "ok", result.error
    spans: list[ReadableSpan] = list(EXPORTER.get_finished_spans())
    [run] = [s for s in spans if s.name == "codemode.run"]
    calls = [s for s in spans if s.name.startswith("codemode.tool_call")]
    assert run.context is not None and format(run.context.trace_id, "032x") == TRACE_ID
    assert run.parent is not None and format(run.parent.span_id, "016x") == PARENT_SPAN
    assert len(calls) == 3
    for call in calls:
        assert call.parent is not None and call.parent.span_id == run.context.span_id
        assert call.context is not None and call.context.trace_id == run.context.trace_id
    reads = [c for c in calls if c.name.endswith("crm/get_customer")]
    [denied] = [c for c in calls if c.name.endswith("crm/delete_customer")]
    for read in reads:
        attributes = dict(read.attributes or {})
        assert attributes["codemode.decision"] == "allowed" and attributes["codemode.outcome"] == "ok"
        assert str(attributes["codemode.args_digest"]).startswith("sha256:")
        for key in ("codemode.call_id", "codemode.schema_hash", "codemode.principal", "codemode.tenant"):
            assert attributes[key], key
    denied_attributes = dict(denied.attributes or {})
    assert denied_attributes["codemode.decision"] == "denied"
    assert denied_attributes["codemode.gate"] == "consent"
    every_value = repr([dict(s.attributes or {}) for s in spans])
    assert SECRET_ARGUMENT not in every_value, "no argument value in any span"
    # The downstream server got each call's own context: same trace, the call span as parent.
    read_span_ids = {format(c.context.span_id, "016x") for c in reads if c.context is not None}
    assert len(seen) == 2
    for traceparent in seen:
        assert traceparent is not None
        _, trace_id, span_id, _ = traceparent.split("-")
        assert trace_id == TRACE_ID and span_id in read_span_ids
