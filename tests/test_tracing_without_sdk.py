"""With no OpenTelemetry SDK installed, calls make no spans of their own, yet the caller's
``traceparent`` still reaches the downstream server (in a child process: a tracer provider, once
set by another test, stays for the whole process)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_SPAN = "00f067aa0ba902b7"

SCRIPT = f"""
import json, sys
from pathlib import Path
from typing import Any, cast

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp_types import ToolAnnotations
from opentelemetry import trace

from codemode import CodeMode, config_from_mapping
from codemode.catalog import save_lock
from codemode.host import McpHost
from codemode.testing import approved_pins, in_memory_transports

seen = []
app = MCPServer("crm")

@app.tool(annotations=ToolAnnotations(read_only_hint=True))
def get_customer(customer_id: str, ctx: Context) -> dict[str, str]:
    meta = cast(dict[str, Any] | None, ctx.request_context.meta)
    seen.append(None if meta is None else meta.get("traceparent"))
    return {{"id": customer_id}}

async def main() -> None:
    config = config_from_mapping(
        {{"servers": {{"crm": {{"command": "not-a-real-command", "trusted": True}}}},
         "sandbox": {{"backend": "process", "pool_size": 0}}}},
        base_dir=Path(sys.argv[1]),
    )
    transports = in_memory_transports({{"crm": app}})
    async with McpHost(config, transports=transports) as host:
        save_lock(config.lock_path, approved_pins(host.catalogs()).lock)
    async with CodeMode(config, transports=transports) as engine:
        result = await engine.run(
            "from servers.crm import get_customer\\n"
            "get_customer(customer_id='a')\\nget_customer(customer_id='b')",
            traceparent="00-{TRACE_ID}-{PARENT_SPAN}-01",
        )
    assert result.status == "ok", result.error
    print(json.dumps({{"provider": type(trace.get_tracer_provider()).__name__, "seen": seen}}))

anyio.run(main)
"""


def test_the_callers_traceparent_reaches_the_server_without_an_sdk(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["provider"] == "ProxyTracerProvider"  # no SDK: the fast path ran
    assert report["seen"] == [f"00-{TRACE_ID}-{PARENT_SPAN}-01"] * 2
