"""A tool that hands its input back transformed would decode PII placeholders for the program:
``[policy.results] pii_masked_tools`` gives such tools the placeholders, never the values."""

from __future__ import annotations

import base64
import gzip
from collections.abc import Callable
from typing import Any, cast

import pytest

from codemode.calls import ToolCallRequest, ToolResult
from codemode.testing import FakeTools, fake_broker, open_test_run

pytestmark = pytest.mark.anyio

READ = {"readOnlyHint": True}
WRITE = {"readOnlyHint": False, "destructiveHint": False}
EMAIL = "ana.secret@example.com"
PHONE = "+33 6 12 34 56 78"

Transform = Callable[[str], str]
TRANSFORMS: dict[str, tuple[Transform, Transform]] = {
    # tool name: (what the tool does to its input, what the program does to undo it)
    "b64": (lambda s: base64.b64encode(s.encode()).decode(), lambda s: base64.b64decode(s).decode()),
    "gzip": (
        lambda s: base64.b64encode(gzip.compress(s.encode())).decode(),
        lambda s: gzip.decompress(base64.b64decode(s)).decode(),
    ),
    "hex": (lambda s: s.encode().hex(), lambda s: bytes.fromhex(s).decode()),
}


def servers() -> FakeTools:
    tools = FakeTools(trusted=frozenset({"crm", "util"}))
    tools.add("crm", "find", lambda _: {"email": EMAIL, "phone": PHONE}, annotations=READ)
    tools.add("crm", "add_note", lambda a: {"saved": a["text"]}, annotations=WRITE)
    for name, (transform, _) in TRANSFORMS.items():
        tools.add("util", name, lambda a, t=transform: {"out": t(a["text"])}, annotations=READ)
    return tools


async def roundtrip(policy: dict[str, Any], tool: str) -> tuple[list[str], FakeTools]:
    """Find a customer, pass each placeholder through ``util/<tool>``, undo the transform."""
    tools = servers()
    broker = fake_broker(tools, policy={"consent": {"never": ["*"]}, **policy})
    binding, _ = open_test_run(broker)

    async def call(server: str, name: str, seq: int, **arguments: Any) -> dict[str, str]:
        live = tools.live_tool(server, name)
        assert live is not None
        request = ToolCallRequest(
            seq=seq, server=server, tool=name, schema_hash=live.schema_hash, arguments=arguments
        )
        outcome = await broker.call_tool(binding, request)
        assert isinstance(outcome, ToolResult), outcome
        return cast(dict[str, str], outcome.structured)

    found = await call("crm", "find", 1)
    assert found["email"].startswith("<pii:email:") and found["phone"].startswith("<pii:phone:")
    undo = TRANSFORMS[tool][1]
    seen = [
        undo((await call("util", tool, seq, text=token))["out"])
        for seq, token in enumerate(found.values(), 2)
    ]
    return seen, tools


@pytest.mark.parametrize("tool", sorted(TRANSFORMS))
async def test_a_transforming_tool_unmasks_pii_unless_the_policy_masks_it(tool: str) -> None:
    # The limit of tokenisation: the transformed value is no PII to the result filter.
    leaked, _ = await roundtrip({}, tool)
    assert leaked == [EMAIL, PHONE]
    masked, tools = await roundtrip({"results": {"pii_masked_tools": ["util/*"]}}, tool)
    assert all(value.startswith("<pii:") for value in masked), masked
    assert EMAIL not in str(tools.calls) and PHONE not in str(tools.calls), "the tool never got a value"


async def test_only_the_named_tools_are_masked_and_others_still_get_the_values() -> None:
    tools = servers()
    policy = {"consent": {"never": ["*"]}, "results": {"pii_masked_tools": ["util/b64"]}}
    broker = fake_broker(tools, policy=policy)
    binding, _ = open_test_run(broker)

    def request(server: str, name: str, seq: int, **arguments: Any) -> ToolCallRequest:
        live = tools.live_tool(server, name)
        assert live is not None
        return ToolCallRequest(
            seq=seq, server=server, tool=name, schema_hash=live.schema_hash, arguments=arguments
        )

    found = await broker.call_tool(binding, request("crm", "find", 1))
    assert isinstance(found, ToolResult)
    token = cast(dict[str, str], found.structured)["email"]
    note = f"write to {token} today"
    for seq, (server, name) in enumerate((("crm", "add_note"), ("util", "b64"), ("util", "hex")), 2):
        assert isinstance(await broker.call_tool(binding, request(server, name, seq, text=note)), ToolResult)
    received = {(call.server, call.tool): call.arguments["text"] for call in tools.calls[1:]}
    assert received[("crm", "add_note")] == f"write to {EMAIL} today", "data still flows between servers"
    assert received[("util", "b64")] == note, "the masked tool got the placeholder as the program wrote it"
    assert received[("util", "hex")] == f"write to {EMAIL} today", "not named: not masked"
