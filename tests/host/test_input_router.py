"""The host's routing of a server's requests for input, and the 2026-07-28 retry rounds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import mcp_types
import pytest
from mcp.shared.exceptions import MCPError

from codemode.config import config_from_mapping
from codemode.host._inputs import (
    MAX_INPUT_ROUNDS,
    NOBODY_TO_ASK,
    SAMPLING_REFUSED,
    InputRoundsExceeded,
    InputRouter,
    drive_input_rounds,
)

pytestmark = pytest.mark.anyio

FORM = mcp_types.ElicitRequestFormParams(
    message="Sure?", requested_schema={"type": "object", "properties": {}}
)


class Person:
    def __init__(self, action: str = "accept") -> None:
        self.action = action
        self.asked: list[str] = []

    async def elicit(
        self, params: mcp_types.ElicitRequestParams
    ) -> mcp_types.ElicitResult | mcp_types.ErrorData:
        self.asked.append(params.message)
        return mcp_types.ElicitResult(action=self.action)  # type: ignore[arg-type]


def router(**server: Any) -> InputRouter:
    config = config_from_mapping({"servers": {"s": {"command": "x", **server}}}, base_dir=Path("/tmp"))
    return InputRouter(config.servers["s"])


async def test_a_legacy_request_goes_to_the_one_call_in_flight() -> None:
    routes, person = router(), Person()
    routes.track("m1", person)
    answer = await routes.client_callbacks()["elicitation_callback"](None, FORM)
    assert isinstance(answer, mcp_types.ElicitResult) and answer.action == "accept"
    assert person.asked == ["Sure?"]


@pytest.mark.parametrize("in_flight", [0, 2])
async def test_a_legacy_request_that_cannot_be_tied_to_one_call_is_refused(in_flight: int) -> None:
    routes, people = router(), [Person(), Person()]
    for marker, person in list(zip(("m1", "m2"), people, strict=True))[:in_flight]:
        routes.track(marker, person)
    answer = await routes.client_callbacks()["elicitation_callback"](None, FORM)
    assert isinstance(answer, mcp_types.ErrorData) and answer.message == NOBODY_TO_ASK
    assert people[0].asked == people[1].asked == []


def test_only_the_allowed_capabilities_are_declared() -> None:
    assert set(router().client_callbacks()) == {"elicitation_callback"}
    assert router(elicitation="deny").client_callbacks() == {}
    assert set(router(roots=["/srv"]).client_callbacks()) == {"elicitation_callback", "list_roots_callback"}


async def test_embedded_requests_are_answered_for_their_own_call() -> None:
    person = Person("decline")
    routes = router(roots=["/srv/data"])
    elicit = mcp_types.ElicitRequest(params=FORM)
    answer = await routes.answer(person, elicit)
    assert isinstance(answer, mcp_types.ElicitResult) and answer.action == "decline"
    roots = await routes.answer(person, mcp_types.ListRootsRequest())
    assert isinstance(roots, mcp_types.ListRootsResult) and [str(r.uri) for r in roots.roots] == [
        "file:///srv/data"
    ]
    sampling = mcp_types.CreateMessageRequest(
        params=mcp_types.CreateMessageRequestParams(messages=[], max_tokens=5)
    )
    refused = await routes.answer(person, sampling)
    assert isinstance(refused, mcp_types.ErrorData) and refused.message == SAMPLING_REFUSED
    assert isinstance(await routes.answer(None, elicit), mcp_types.ErrorData), "no person: refused"
    denied = await router(elicitation="deny").answer(person, elicit)
    assert isinstance(denied, mcp_types.ElicitResult) and denied.action == "decline"
    assert person.asked == ["Sure?"]


def _input_required(state: str | None, **requests: mcp_types.InputRequest) -> mcp_types.InputRequiredResult:
    return mcp_types.InputRequiredResult(input_requests=requests or None, request_state=state)


async def test_rounds_echo_the_state_byte_for_byte_and_answer_every_request() -> None:
    person = Person()
    routes = router()
    state = '{"opaque": "\\u00e9 \\n", "n": 1}'
    seen: list[tuple[dict[str, Any] | None, str | None]] = []
    final = mcp_types.CallToolResult(content=[])

    async def retry(responses: Any, request_state: str | None) -> Any:
        seen.append((responses, request_state))
        if len(seen) == 1:
            return _input_required("round-2")  # state only: the server is still working
        return final

    first = _input_required(
        state, a=mcp_types.ElicitRequest(params=FORM), b=mcp_types.ElicitRequest(params=FORM)
    )
    result = await drive_input_rounds(first, lambda request: routes.answer(person, request), retry)
    assert result is final
    assert seen[0][1] == state and set(seen[0][0] or {}) == {"a", "b"}
    assert seen[1] == (None, "round-2")
    assert person.asked == ["Sure?", "Sure?"]


async def test_a_server_that_never_stops_asking_is_given_up_on() -> None:
    async def retry(responses: Any, request_state: str | None) -> Any:
        return _input_required("again", a=mcp_types.ElicitRequest(params=FORM))

    with pytest.raises(InputRoundsExceeded, match=f"after {MAX_INPUT_ROUNDS} rounds"):
        await drive_input_rounds(
            _input_required("s", a=mcp_types.ElicitRequest(params=FORM)),
            lambda r: router().answer(Person(), r),
            retry,
        )


async def test_a_refused_request_ends_the_call_without_a_retry() -> None:
    retried: list[str | None] = []

    async def retry(responses: Any, request_state: str | None) -> Any:
        retried.append(request_state)

    with pytest.raises(MCPError, match="nobody may answer"):
        await drive_input_rounds(
            _input_required("s", a=mcp_types.ElicitRequest(params=FORM)),
            lambda r: router().answer(None, r),
            retry,
        )
    assert retried == []
