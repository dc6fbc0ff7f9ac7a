"""Hand-built calls, tools, policies and catalogs for the gate tests (no servers, no sandbox)."""

from __future__ import annotations

import time
from typing import Any

from codemode.broker._facts import Call, Facts
from codemode.broker._run import RunState
from codemode.calls import RunBinding, ToolCallRequest
from codemode.catalog import LockFile, ServerCatalog, ToolSpec, approve, observe, tool_hash
from codemode.config import PolicyConfig

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "customer_id": {"type": "string", "pattern": "^CUST-[0-9]{4}$"},
        "note": {"type": "string"},
    },
    "required": ["customer_id"],
}


def spec(
    name: str = "add_note", *, annotations: dict[str, Any] | None = None, schema: Any = None
) -> ToolSpec:
    schema = SCHEMA if schema is None else schema
    digest = tool_hash(
        name=name,
        title=None,
        description="d",
        input_schema=schema,
        output_schema=None,
        annotations=annotations,
    )
    return ToolSpec(
        server="crm",
        name=name,
        description="d",
        input_schema=schema,
        annotations=annotations,
        schema_hash=digest,
    )


def policy(**data: Any) -> PolicyConfig:
    return PolicyConfig.model_validate(data)


def binding(principal: str = "local", tenant: str = "default", **extra: Any) -> RunBinding:
    return RunBinding(run_id="run-1", principal=principal, tenant=tenant, trace_id="t", **extra)


def context(
    tool: ToolSpec | None = None, arguments: dict[str, Any] | None = None, **binding_args: Any
) -> Call:
    tool = tool or spec()
    arguments = {"customer_id": "CUST-0001"} if arguments is None else arguments
    bound = binding(**binding_args)
    request = ToolCallRequest(
        seq=1, server="crm", tool=tool.name, schema_hash=tool.schema_hash, arguments=arguments
    )
    return Call(
        binding=bound,
        run=RunState(binding=bound),
        server="crm",
        name=tool.name,
        arguments=arguments,
        now=time.time(),
        request=request,
    )


def principal_facts(rules: PolicyConfig | None = None, **facts: Any) -> Facts:
    """Facts as the principal gate leaves them (plus ``facts``)."""
    return Facts(principal=(rules or policy()).principal("local"), **facts)


class Catalog:
    def __init__(self, *tools: ToolSpec, trusted: bool = False) -> None:
        self.tools = {t.name: t for t in tools}
        self.trusted = trusted

    def live_tool(self, server: str, tool: str) -> ToolSpec | None:
        return self.tools.get(tool) if server == "crm" else None

    async def settle(self, server: str) -> None:
        return None

    def is_trusted(self, server: str) -> bool:
        return self.trusted

    def server_version(self, server: str) -> str | None:
        return None


class Pins:
    def __init__(self, *tools: ToolSpec) -> None:
        lock, _ = observe(LockFile(), ServerCatalog(server="crm", tools=tools))
        self.lock, _ = approve(lock)

    def reload_if_changed(self) -> bool:
        return False  # no file behind it
