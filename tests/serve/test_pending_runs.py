"""Runs that wait on the 2026-07-28 client for answers: each answer counts for its own question only,
and only a run whose client stopped coming back is dropped.

End to end, the input rounds are exercised by ``test_serve.py`` (approvals) and ``test_relay.py``;
here the registry is driven directly, the way ``run_code`` drives it, to replay what a client or a
proxy could send: a retry sent again after its answer was taken, or twice at once.
"""

from __future__ import annotations

import time

import anyio
import mcp_types
import pytest

from codemode.serve._consent import PendingRun, PendingRuns, asked, deliver

pytestmark = pytest.mark.anyio

YES: mcp_types.InputResponses = {
    "question": mcp_types.ElicitResult(action="accept", content={"approve": True})
}


def question(text: str) -> mcp_types.ElicitRequestParams:
    return mcp_types.ElicitRequestFormParams(
        message=text, requested_schema={"type": "object", "properties": {"approve": {"type": "boolean"}}}
    )


async def next_question(run: PendingRun) -> mcp_types.InputRequiredResult:
    """What ``run_code`` returns to the client while the run asks (see ``_next_event``)."""
    event = await run.events_out.receive()
    assert not isinstance(event, mcp_types.CallToolResult), "the run asks before it ends"
    return asked(run, event)


async def test_a_replayed_answer_never_answers_the_question_asked_after_it() -> None:
    runs = PendingRuns()
    run = runs.create("alice", "acme", client_can_elicit=True)
    answers: list[object] = []

    async def the_run() -> None:
        for text in ("add a note?", "delete the customer?"):
            answers.append(await run.ask(question(text), 30))

    async with anyio.create_task_group() as group:
        group.start_soon(the_run)
        first = await next_question(run)
        taken = runs.take(first.request_state or "", "alice", "acme")
        assert taken is not None
        assert deliver(taken[0], taken[1], YES), "the answer to the question asked"
        second = await next_question(run)
        assert second.request_state != first.request_state, "each question has its own state"
        # The client's first retry is sent again (a lost response, a proxy's retry): refused.
        replayed = runs.take(first.request_state or "", "alice", "acme")
        assert replayed is not None and not deliver(replayed[0], replayed[1], YES)
        # A retry sent twice at once: the first delivery counts, the duplicate is refused.
        current = runs.take(second.request_state or "", "alice", "acme")
        assert current is not None
        assert deliver(current[0], current[1], None) and not deliver(current[0], current[1], YES)
    assert [getattr(a, "action", a) for a in answers] == ["accept", None], "the second question got no yes"


async def test_only_runs_whose_client_stopped_answering_are_dropped() -> None:
    runs = PendingRuns()
    working = runs.create("alice", "acme", client_can_elicit=True)
    asking = runs.create("alice", "acme", client_can_elicit=True)
    assert runs.expire(0) == 0, "a run that is working, however old, is never dropped"

    async def ask() -> None:
        await asking.ask(question("go on?"), 30)

    async with anyio.create_task_group() as group:
        group.start_soon(ask)
        await next_question(asking)
        assert runs.expire(60) == 0, "the client has a minute to come back"
        assert asking.idle_since is not None
        asking.idle_since = time.monotonic() - 61
        assert runs.expire(60) == 1
        assert asking.scope.cancel_called and not working.scope.cancel_called
        group.cancel_scope.cancel()
    assert len(runs) == 1


async def test_a_state_of_another_principal_or_an_unknown_run_is_not_taken() -> None:
    runs = PendingRuns()
    run = runs.create("alice", "acme", client_can_elicit=True)
    assert runs.take(f"{run.token}.x", "bob", "acme") is None
    assert runs.take("no-such-run.x", "alice", "acme") is None
