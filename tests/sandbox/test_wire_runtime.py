"""The sandbox wire contract end to end: the real staged runtime talking to the real host channel,
every message kind in both directions.

See ``test_wire.py`` for the contract itself (``codemode/sandbox/_wire.py``, staged byte for byte as
the runtime's ``codemode_runtime._wire``).
"""

# pyright: reportPrivateUsage=false
# (the host's validators and message classifier are what these tests hold to the contract)

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest

from codemode.calls import (
    CallDenied,
    CallFailed,
    CallOutcome,
    ModuleSource,
    PromptGetRequest,
    ResourceReadRequest,
    RunBinding,
    ToolCallRequest,
    ToolError,
    ToolResult,
    content_blocks,
)
from codemode.sandbox import _outcome
from codemode.sandbox import _wire as wire
from codemode.sandbox._channel import HostChannel, RemoteError, RunContext
from codemode.sandbox._files import BOOT_SCRIPT
from codemode.sandbox._framing import decode
from codemode.sandbox._outcome import parse_reply, parse_snapshot

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

MiB = 1024 * 1024


# -- the real runtime talking to the real host channel -------------------------------------------

_PROGRAM = """
import codemode, codemode_runtime
from servers.demo import VALUE
seen = [VALUE]
try:
    import servers.missing
except ModuleNotFoundError:
    seen.append("no servers.missing")
seen.append(codemode.call_tool("demo", "ok", "sha256:h", {"a": [1, None]}, idempotency_key="k-1"))
seen.append(codemode.call_tool("demo", "content", "sha256:h", {}))
for tool in ("tool_error", "denied", "failed"):
    try:
        codemode.call_tool("demo", tool, "sha256:h", {})
    except codemode.ToolError as exc:
        seen.append(["ToolError", exc.message, exc.content])
    except codemode.CallDenied as exc:
        seen.append(["CallDenied", exc.gate, exc.reason])
    except codemode.CallFailed as exc:
        seen.append(["CallFailed", exc.reason, exc.outcome_unknown])
seen.append([[c.uri, c.text] for c in codemode.read_resource("demo", "mem://a")])
seen.append([[m.role, m.content] for m in codemode.get_prompt("demo", "greet", {"who": "Ada"})])
refused = [("call", {"server": "demo"}), ("shell", {}), ("hello", {"secret": "x", "protocol": 1})]
for method, params in refused:
    try:
        codemode_runtime._request(method, params)
    except codemode_runtime._RemoteError as exc:
        seen.append(exc.code)
print("partial output")
seen.append(codemode.call_tool("demo", "snapshot", "sha256:h", {}))
seen
"""


class _Modules:
    def module_source(self, module: str) -> ModuleSource | None:
        if module == "servers":
            return ModuleSource(source="", is_package=True)
        if module == "servers.demo":
            return ModuleSource(source="VALUE = 'imported'\n", is_package=True)
        return None


@dataclass
class _Handler:
    channel: HostChannel
    requests: list[Any] = field(default_factory=lambda: [])
    snapshots: list[_outcome.Snapshot] = field(default_factory=lambda: [])

    async def call_tool(self, binding: RunBinding, request: ToolCallRequest) -> CallOutcome:
        self.requests.append(request)
        if request.tool == "snapshot":
            # The program waits for this call; its runtime's reader thread answers meanwhile.
            for _ in range(500):
                snapshot = parse_snapshot(await self.channel.request(wire.SNAPSHOT, {}))
                self.snapshots.append(snapshot)
                if snapshot.stdout:
                    break
                await anyio.sleep(0.01)
            return ToolResult(structured={"snapshots": len(self.snapshots)})
        return {
            "ok": ToolResult(structured={"total": 3}),
            "content": ToolResult(
                content=content_blocks(
                    [{"type": "text", "text": '{"a": 1}'}, {"type": "text", "text": "plain"}]
                )
            ),
            "tool_error": ToolError(
                message="no such row", content=content_blocks([{"type": "text", "text": "42"}])
            ),
            "denied": CallDenied(gate="policy", reason="not allowed"),
        }.get(request.tool, CallFailed(reason="server down", outcome_unknown=True))

    async def read_resource(self, binding: RunBinding, request: ResourceReadRequest) -> CallOutcome:
        self.requests.append(request)
        return ToolResult(structured={"contents": [{"uri": request.uri, "text": "body"}]})

    async def get_prompt(self, binding: RunBinding, request: PromptGetRequest) -> CallOutcome:
        self.requests.append(request)
        return ToolResult(
            structured={"messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}]}
        )


async def test_every_message_kind_between_the_real_runtime_and_the_host(staged: Path, tmp_path: Path) -> None:
    """The staged runtime, started as a sandbox starts it (minus the sandbox), and a host channel."""
    directory = tmp_path / "channel"
    channel = HostChannel(directory, max_frame_bytes=4 * MiB)
    await channel.listen()
    runtime = await anyio.open_process(
        [sys.executable, "-I", "-B", str(staged / BOOT_SCRIPT)],
        env={wire.CHANNEL_DIR_ENV: str(directory)},
        stdin=subprocess.DEVNULL,
        stdout=None,
        stderr=None,
    )
    try:
        await _converse(channel)
        # The channel's end is the runtime's end.
        assert await runtime.wait() == 0
    finally:
        if runtime.returncode is None:
            runtime.kill()
        await runtime.aclose()


async def _converse(channel: HostChannel) -> None:
    await channel.accept(30.0)  # hello, answered with HelloResult
    handler = _Handler(channel)
    binding = RunBinding(run_id="r-1", principal="alice", tenant="acme", trace_id="t-1")
    async with anyio.create_task_group() as tg:
        tg.start_soon(channel.serve)
        channel.bind(RunContext(binding=binding, modules=_Modules(), handler=handler))
        params: wire.RunParams = {
            "run_id": binding.run_id,
            "code": _PROGRAM,
            "output_bytes": 4096,
            "result_bytes": 65536,
            "bindings": {},
            "fresh": False,
        }
        reply = parse_reply(await channel.request(wire.RUN, dict(params)))
        assert reply.status == "ok", reply.error
        assert reply.stdout == "partial output\n"
        assert reply.result_kind == "json" and reply.result_json is not None
        assert decode(reply.result_json.encode()) == [
            "imported",
            "no servers.missing",
            {"total": 3},
            [{"a": 1}, "plain"],
            ["ToolError", "no such row", [42]],
            ["CallDenied", "policy", "not allowed"],
            ["CallFailed", "server down", True],
            [["mem://a", "body"]],
            [["user", "hi"]],
            wire.INVALID_PARAMS,
            wire.METHOD_NOT_FOUND,
            wire.INVALID_REQUEST,
            {"snapshots": len(handler.snapshots)},
        ]
        assert handler.snapshots[-1].stdout == "partial output\n"
        first = handler.requests[0]
        assert isinstance(first, ToolCallRequest)
        assert (first.arguments, first.idempotency_key, first.schema_hash) == (
            {"a": [1, None]},
            "k-1",
            "sha256:h",
        )
        assert [type(r).__name__ for r in handler.requests[-3:]] == [
            "ResourceReadRequest",
            "PromptGetRequest",
            "ToolCallRequest",
        ]
        prompt = handler.requests[-2]
        assert isinstance(prompt, PromptGetRequest) and prompt.arguments == {"who": "Ada"}

        # A failing program: the reply carries the error's shape.
        failing = {**params, "code": "raise ValueError('bad value')\n"}
        error_reply = parse_reply(await channel.request(wire.RUN, failing))
        assert error_reply.status == "error" and error_reply.error is not None
        assert (error_reply.error.type, error_reply.error.message) == ("ValueError", "bad value")
        assert 'File "<program #2>", line 1' in error_reply.error.traceback
        assert "codemode_runtime" not in error_reply.error.traceback
        # Requests the runtime refuses come back as JSON-RPC errors.
        with pytest.raises(RemoteError, match="unknown method"):
            await channel.request("shell", {})
        with pytest.raises(RemoteError, match="'code' must be a string"):
            await channel.request(wire.RUN, {**params, "code": 1})
        channel.unbind()
        await channel.aclose()
        tg.cancel_scope.cancel()
