"""The host's routing of a server's sampling requests (in this process: no server, no sandbox)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import mcp_types
import pytest

from codemode.config import config_from_mapping
from codemode.host._inputs import NO_MODEL_TO_ASK, NOBODY_TO_ASK, SAMPLING_REFUSED, InputRouter

pytestmark = pytest.mark.anyio

PARAMS = mcp_types.CreateMessageRequestParams(
    messages=[mcp_types.SamplingMessage(role="user", content=mcp_types.TextContent(type="text", text="Hi"))],
    max_tokens=5,
)
REPLY = mcp_types.CreateMessageResult(
    role="assistant", content=mcp_types.TextContent(type="text", text="Hello"), model="m"
)


class Call:
    """A call's handler that can sample (the broker's ``CallInputs`` in this role)."""

    def __init__(self) -> None:
        self.sampled: list[int] = []

    async def elicit(
        self, params: mcp_types.ElicitRequestParams
    ) -> mcp_types.ElicitResult | mcp_types.ErrorData:
        return mcp_types.ElicitResult(action="decline")

    async def sample(
        self, params: mcp_types.CreateMessageRequestParams
    ) -> mcp_types.CreateMessageResult | mcp_types.ErrorData:
        self.sampled.append(params.max_tokens)
        return REPLY


class ElicitOnly:
    async def elicit(
        self, params: mcp_types.ElicitRequestParams
    ) -> mcp_types.ElicitResult | mcp_types.ErrorData:
        return mcp_types.ElicitResult(action="decline")


def router(**server: Any) -> InputRouter:
    config = config_from_mapping({"servers": {"s": {"command": "x", **server}}}, base_dir=Path("/tmp"))
    return InputRouter(config.servers["s"])


def test_sampling_is_declared_only_when_relayed() -> None:
    assert "sampling_callback" not in router().client_callbacks(), "deny is the default"
    assert "sampling_callback" not in router(sampling="deny").client_callbacks()
    assert set(router(sampling="relay").client_callbacks()) == {"elicitation_callback", "sampling_callback"}


async def test_a_legacy_request_goes_to_the_one_call_in_flight() -> None:
    routes, call = router(sampling="relay"), Call()
    routes.track("m1", call)
    assert await routes.client_callbacks()["sampling_callback"](None, PARAMS) is REPLY
    assert call.sampled == [5]


@pytest.mark.parametrize("in_flight", [0, 2])
async def test_a_legacy_request_that_cannot_be_tied_to_one_call_is_refused(in_flight: int) -> None:
    routes, calls = router(sampling="relay"), [Call(), Call()]
    for marker, call in list(zip(("m1", "m2"), calls, strict=True))[:in_flight]:
        routes.track(marker, call)
    answer = await routes.client_callbacks()["sampling_callback"](None, PARAMS)
    assert isinstance(answer, mcp_types.ErrorData) and answer.message == NOBODY_TO_ASK
    assert calls[0].sampled == calls[1].sampled == []


async def test_embedded_requests_are_answered_for_their_own_call() -> None:
    request = mcp_types.CreateMessageRequest(params=PARAMS)
    call = Call()
    assert await router(sampling="relay").answer(call, request) is REPLY
    denied = await router().answer(call, request)
    assert isinstance(denied, mcp_types.ErrorData) and denied.message == SAMPLING_REFUSED
    nobody = await router(sampling="relay").answer(None, request)
    assert isinstance(nobody, mcp_types.ErrorData) and nobody.message == NOBODY_TO_ASK
    no_model = await router(sampling="relay").answer(ElicitOnly(), request)
    assert isinstance(no_model, mcp_types.ErrorData) and no_model.message == NO_MODEL_TO_ASK
    assert call.sampled == [5], "only the relayed request reached the call"
