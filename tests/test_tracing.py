"""OpenTelemetry: one trace per run, a child span per tool call with the evidence chain and no
argument values, the caller's traceparent as the parent, and the call's context passed on to
the downstream server in ``_meta``."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import anyio
import pytest
from mcp import Client
from mcp.server.mcpserver import Context, MCPServer
from mcp_types import ToolAnnotations
from opentelemetry import propagate, trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from codemode import CodeMode, config_from_mapping
from codemode._tracing import note_intent, run_span
from codemode.calls import RunBinding
from codemode.catalog import save_lock
from codemode.config import Config
from codemode.host import McpHost, TransportFactory
from codemode.ledger import CallIntent, arguments_digest, open_ledger
from codemode.serve._app import CodemodeServer, Identity
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


async def approved_crm(tmp_path: Path, seen: list[str | None]) -> tuple[Config, dict[str, TransportFactory]]:
    """A config whose in-memory crm (recording each call's traceparent in ``seen``) is approved."""
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
    return config, transports


@pytest.mark.integration
async def test_a_run_is_one_trace_with_a_span_per_call_and_no_argument_values(tmp_path: Path) -> None:
    seen: list[str | None] = []
    config, transports = await approved_crm(tmp_path, seen)
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
        assert attributes["codemode.filter.secrets_redacted"] == 0, "what the result filter changed"
        for key in ("codemode.call_id", "codemode.schema_hash", "codemode.principal", "codemode.tenant"):
            assert attributes[key], key
    denied_attributes = dict(denied.attributes or {})
    assert denied_attributes["codemode.decision"] == "denied"
    assert denied_attributes["codemode.gate"] == "consent"
    # The run's span says what it cost: the sandbox's CPU, memory and channel, the broker's CPU.
    usage = result.usage
    assert usage is not None and usage.cpu_s is not None and usage.peak_mb is not None
    run_attributes = dict(run.attributes or {})
    assert run_attributes["codemode.usage.cpu_s"] == usage.cpu_s > 0
    assert run_attributes["codemode.usage.peak_mb"] == usage.peak_mb > 0
    assert run_attributes["codemode.usage.channel_in_bytes"] == usage.channel_in_bytes > len(program)
    assert run_attributes["codemode.usage.channel_out_bytes"] == usage.channel_out_bytes > 0
    assert run_attributes["codemode.usage.broker_cpu_s"] == result.broker_cpu_s
    assert result.broker_cpu_s is not None and result.broker_cpu_s > 0, "three calls went through the gates"
    assert "codemode.usage.cap_hit" not in run_attributes, "no cap stopped it"
    every_value = repr([dict(s.attributes or {}) for s in spans])
    assert SECRET_ARGUMENT not in every_value, "no argument value in any span"
    # The downstream server got each call's own context: same trace, the call span as parent.
    read_span_ids = {format(c.context.span_id, "016x") for c in reads if c.context is not None}
    assert len(seen) == 2
    for traceparent in seen:
        assert traceparent is not None
        _, trace_id, span_id, _ = traceparent.split("-")
        assert trace_id == TRACE_ID and span_id in read_span_ids
    # The ledger files the run and its calls under the same W3C trace id: a row leads to the trace.
    ledger = open_ledger(config.ledger_path, create=False)
    try:
        run_record = ledger.get_run(result.run_id)
        assert run_record is not None and run_record.trace_id == TRACE_ID
        # The run's record keeps what the run cost, as its result reports it.
        assert run_record.summary is not None and result.usage is not None
        assert run_record.summary["usage"] == result.usage.model_dump(mode="json")
        assert run_record.summary["broker_cpu_s"] == result.broker_cpu_s
        assert {c.trace_id for c in ledger.list_calls(run_id=result.run_id)} == {TRACE_ID}
    finally:
        ledger.close()


def test_without_a_caller_the_ledger_files_the_run_under_the_trace_that_began_here() -> None:
    EXPORTER.clear()
    with run_span(lambda trace_id: _binding(trace_id)) as (span, binding):
        assert span.is_recording()
    [run] = EXPORTER.get_finished_spans()
    assert run.context is not None and binding.trace_id == format(run.context.trace_id, "032x")


def test_with_no_sdk_the_trace_id_is_the_callers_or_a_fresh_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("codemode._tracing.tracer", trace.NoOpTracer)
    with run_span(_binding, traceparent=f"00-{TRACE_ID}-{PARENT_SPAN}-01") as (_, binding):
        assert binding.trace_id == TRACE_ID
    fresh: set[str] = set()
    for _ in range(2):
        with run_span(_binding) as (span, binding):
            assert not span.get_span_context().is_valid
            fresh.add(binding.trace_id)
    assert len(fresh) == 2 and all(len(t) == 32 and int(t, 16) for t in fresh)


def test_the_ledgers_intent_is_on_the_span_and_its_digest_is_made_only_when_recorded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    intent = CallIntent(
        call_id="run_t/1",
        run_id="run_t",
        trace_id=TRACE_ID,
        principal="agent",
        tenant="default",
        server="crm",
        tool="get_customer",
        schema_hash="sha256:schema",
        tool_version="1.2.0",
        arguments={"customer_id": SECRET_ARGUMENT},
    )
    digests: list[str] = []

    def digest() -> str:
        digests.append(arguments_digest(intent.arguments))
        return digests[-1]

    EXPORTER.clear()
    with run_span(_binding):
        note_intent(intent, digest)
    [run] = EXPORTER.get_finished_spans()
    attributes = dict(run.attributes or {})
    assert attributes["codemode.call_id"] == "run_t/1" and attributes["codemode.tool_version"] == "1.2.0"
    assert attributes["codemode.args_digest"] == digests[0] and "codemode.approval_id" not in attributes
    assert SECRET_ARGUMENT not in repr(attributes)
    monkeypatch.setattr("codemode._tracing.tracer", trace.NoOpTracer)
    with run_span(_binding):
        note_intent(intent, digest)
    assert len(digests) == 1, "no digest is made for a span that records nothing"


def _binding(trace_id: str) -> RunBinding:
    return RunBinding(run_id="run_t", principal="agent", tenant="default", trace_id=trace_id, expires_at=0)


@pytest.mark.integration
@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_run_code_through_serve_is_one_trace_under_the_callers_traceparent(
    tmp_path: Path, mode: str
) -> None:
    """The whole path an agent takes: its MCP request's ``_meta.traceparent`` to the downstream server."""
    seen: list[str | None] = []
    config, transports = await approved_crm(tmp_path, seen)
    program = f"from servers.crm import get_customer\nget_customer(customer_id={SECRET_ARGUMENT!r})['name']\n"
    EXPORTER.clear()
    trace_id = 0
    async with CodeMode(config, transports=transports) as engine, anyio.create_task_group() as tg:
        server = CodemodeServer(engine, default=Identity(None, None))
        server.attach(tg)
        async with Client(server.mcp, mode=mode) as client:
            # The agent's own span is current, as in an instrumented agent; its context travels in
            # _meta (the SDK's client may put its own request span, of the same trace, in between).
            with trace.get_tracer("agent").start_as_current_span("agent.turn") as agent:
                carrier: dict[str, str] = {}
                propagate.inject(carrier)
                reply = await client.call_tool("run_code", {"code": program}, meta=cast(Any, carrier))
            assert not reply.is_error, reply
            trace_id = agent.get_span_context().trace_id
        tg.cancel_scope.cancel()
    spans = list(EXPORTER.get_finished_spans())
    [run] = [s for s in spans if s.name == "codemode.run"]
    [call] = [s for s in spans if s.name.startswith("codemode.tool_call")]
    assert run.context is not None and run.context.trace_id == trace_id, "the run joins the agent's trace"
    assert run.parent is not None and run.parent.trace_id == trace_id
    assert call.parent is not None and call.parent.span_id == run.context.span_id
    assert SECRET_ARGUMENT not in repr([dict(s.attributes or {}) for s in spans])
    [downstream] = seen
    assert downstream is not None and downstream.split("-")[1] == format(trace_id, "032x")
