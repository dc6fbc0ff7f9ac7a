"""A stateless client's retry reaching another replica than the one running its run (issue 42).

Two replicas are two :class:`PendingRuns` with an :class:`InputRelay` each, on two connections
of one ledger file; the holder's side is driven the way ``run_code`` drives it (see
``next_event``). The retry's answer goes through replica B to the run on replica A, and B
returns what came of it: the next question, then the final result. The ledger's clock is a
:class:`FakeClock`, so expiry and a silent holder are reached by moving it, not by waiting.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import mcp_types
import pytest

from codemode.ledger import StoreLedger, open_ledger, round_key
from codemode.serve._consent import PendingRun, PendingRuns, asked
from codemode.serve._input_relay import ALREADY_ANSWERED, InputRelay
from codemode.testing import FakeClock
from tests.serve.test_pending_runs import YES, question

pytestmark = pytest.mark.anyio

FINAL = mcp_types.CallToolResult(
    content=[mcp_types.TextContent(type="text", text="deleted 1 customer")],
    structured_content={"run_id": "run-1", "status": "ok"},
    is_error=False,
)


@dataclass
class Replica:
    runs: PendingRuns
    relay: InputRelay
    ledger: StoreLedger

    async def next_event(self, run: PendingRun) -> mcp_types.CallToolResult | mcp_types.InputRequiredResult:
        """``CodemodeServer._next_event``: the run's next question (recorded), or its result."""
        event = await run.events_out.receive()
        if isinstance(event, mcp_types.CallToolResult):
            self.runs.forget(run.token)
            return event
        result = asked(run, event)
        await self.relay.asked(run, result.request_state or "", event.expires_at)
        return result


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def replicas(tmp_path: Path, clock: FakeClock) -> AsyncIterator[tuple[Replica, Replica]]:
    path = tmp_path / "codemode.db"
    opened: list[StoreLedger] = []
    made: list[Replica] = []
    for name in ("a:8765", "b:8765"):
        ledger = open_ledger(path, clock=clock)
        opened.append(ledger)
        made.append(
            Replica(
                PendingRuns(), InputRelay(ledger.input_rounds, name, poll_s=0.01, heartbeat_s=0.05), ledger
            )
        )
    yield made[0], made[1]
    for ledger in opened:
        ledger.close()


def two_questions_then_done(
    run: PendingRun, answers: list[object]
) -> Callable[[], Coroutine[Any, Any, None]]:
    async def the_run() -> None:
        for text in ("add a note?", "delete the customer?"):
            answers.append(await run.ask(question(text), 30))
        await run.events_in.send(FINAL)

    return the_run


async def test_a_round_asked_on_a_is_answered_through_b_which_returns_the_next_question_then_the_result(
    replicas: tuple[Replica, Replica],
) -> None:
    a, b = replicas
    run = a.runs.create("alice", "acme", client_can_elicit=True)
    answers: list[object] = []
    async with anyio.create_task_group() as group:
        group.start_soon(two_questions_then_done(run, answers))
        first = await a.next_event(run)
        assert isinstance(first, mcp_types.InputRequiredResult)
        group.start_soon(a.relay.serve, a.next_event)  # A takes relayed answers
        assert b.runs.take(first.request_state or "", "alice", "acme") is None, "B does not hold the run"
        second = await b.relay.forward(first.request_state or "", "alice", "acme", YES)
        assert isinstance(second, mcp_types.InputRequiredResult), second
        assert second.request_state != first.request_state
        asked_again: object = (second.input_requests or {}).get("question")
        assert isinstance(asked_again, mcp_types.ElicitRequest)
        assert "delete the customer?" in asked_again.params.message
        final = await b.relay.forward(second.request_state or "", "alice", "acme", YES)
        assert final == FINAL, "the result as A would have returned it"
        group.cancel_scope.cancel()
    assert [getattr(x, "action", x) for x in answers] == ["accept", "accept"]
    assert len(a.runs) == 0, "the run is over on A"


async def test_another_principals_retry_is_answered_like_an_unknown_one_and_delivers_nothing(
    replicas: tuple[Replica, Replica],
) -> None:
    a, b = replicas
    run = a.runs.create("alice", "acme", client_can_elicit=True)
    answers: list[object] = []
    async with anyio.create_task_group() as group:
        group.start_soon(two_questions_then_done(run, answers))
        first = await a.next_event(run)
        assert isinstance(first, mcp_types.InputRequiredResult)
        state = first.request_state or ""
        assert await b.relay.forward(state, "mallory", "acme", YES) is None
        assert await b.relay.forward(state, "alice", "other-tenant", YES) is None
        assert await b.relay.forward(state + "x", "alice", "acme", YES) is None
        found = b.ledger.input_rounds.get(round_key(state))
        assert found is not None and found.state == "open" and answers == []
        group.cancel_scope.cancel()


async def test_a_retry_reaching_the_holder_closes_the_round_to_the_other_replica(
    replicas: tuple[Replica, Replica],
) -> None:
    a, b = replicas
    run = a.runs.create("alice", "acme", client_can_elicit=True)
    async with anyio.create_task_group() as group:
        group.start_soon(two_questions_then_done(run, []))
        first = await a.next_event(run)
        assert isinstance(first, mcp_types.InputRequiredResult)
        assert await a.relay.claim(first.request_state or ""), "the fast path: answered in memory"
        relayed = await b.relay.forward(first.request_state or "", "alice", "acme", YES)
        assert isinstance(relayed, mcp_types.CallToolResult) and relayed.is_error
        assert relayed.content[0] == mcp_types.TextContent(type="text", text=ALREADY_ANSWERED)
        group.cancel_scope.cancel()


async def test_a_relayed_answer_that_won_still_reaches_the_run_when_the_retry_also_reaches_the_holder(
    replicas: tuple[Replica, Replica],
) -> None:
    a, b = replicas
    run = a.runs.create("alice", "acme", client_can_elicit=True)
    answers: list[object] = []
    relayed: list[object] = []
    with anyio.fail_after(20):
        async with anyio.create_task_group() as group:
            group.start_soon(two_questions_then_done(run, answers))
            first = await a.next_event(run)
            assert isinstance(first, mcp_types.InputRequiredResult)
            state = first.request_state or ""

            async def through_b() -> None:
                relayed.append(await b.relay.forward(state, "alice", "acme", YES))

            group.start_soon(through_b)
            while (found := a.ledger.input_rounds.get(round_key(state))) is None or found.state == "open":
                await anyio.sleep(0.01)
            # The same retry, sent again, reaches A too: B's answer came first and A's loses...
            assert not await a.relay.claim(state)
            # ...yet the answer B took still goes to the run, and B returns what came of it.
            group.start_soon(a.relay.serve, a.next_event)
            while not relayed:
                await anyio.sleep(0.01)
            group.cancel_scope.cancel()
    assert isinstance(relayed[0], mcp_types.InputRequiredResult), relayed[0]
    assert [getattr(x, "action", x) for x in answers] == ["accept"]


async def test_an_outcome_the_ledger_refuses_is_logged_and_the_replica_serves_on(
    replicas: tuple[Replica, Replica], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = replicas
    run = a.runs.create("alice", "acme", client_can_elicit=True)
    answers: list[object] = []
    posts: list[str] = []

    def refused(self: object, key: str, text: str, *, lost: bool = False) -> None:
        posts.append(key)
        raise RuntimeError("the database went away")

    monkeypatch.setattr(type(a.ledger.input_rounds), "post", refused)
    with anyio.fail_after(20):
        async with anyio.create_task_group() as group:
            group.start_soon(two_questions_then_done(run, answers))
            first = await a.next_event(run)
            assert isinstance(first, mcp_types.InputRequiredResult)

            async def through_b() -> None:
                await b.relay.forward(first.request_state or "", "alice", "acme", YES)

            group.start_soon(a.relay.serve, a.next_event)
            group.start_soon(through_b)
            while not posts:
                await anyio.sleep(0.01)
            await anyio.sleep(0.2)  # an error escaping the relay would end this task group now
            group.cancel_scope.cancel()
    assert [getattr(x, "action", x) for x in answers] == ["accept"]


async def test_an_answer_after_the_question_expired_is_refused_at_once(
    replicas: tuple[Replica, Replica], clock: FakeClock
) -> None:
    a, b = replicas
    run = a.runs.create("alice", "acme", client_can_elicit=True)
    await a.relay.asked(run, f"{run.token}.n1", time.time() + 5)
    clock.advance(6)
    refused = await b.relay.forward(f"{run.token}.n1", "alice", "acme", YES)
    assert isinstance(refused, mcp_types.CallToolResult) and refused.is_error
    text = refused.content[0]
    assert isinstance(text, mcp_types.TextContent)
    assert "expired" in text.text and "'a:8765'" in text.text


async def test_a_killed_holder_ends_the_wait_with_an_error_naming_it(
    replicas: tuple[Replica, Replica], clock: FakeClock
) -> None:
    a, b = replicas
    run = a.runs.create("alice", "acme", client_can_elicit=True)
    state = f"{run.token}.n1"
    await a.relay.asked(run, state, time.time() + 600)  # A asks, then dies: nobody takes answers
    relayed: list[object] = []

    async def retry_on_b() -> None:
        relayed.append(await b.relay.forward(state, "alice", "acme", YES))

    async with anyio.create_task_group() as group:
        group.start_soon(retry_on_b)
        while (found := b.ledger.input_rounds.get(round_key(state))) is None or found.state != "answered":
            await anyio.sleep(0.01)
        clock.advance(b.ledger.input_rounds.holder_stale_s + 1)  # A's heartbeat stopped
    [lost] = relayed
    assert isinstance(lost, mcp_types.CallToolResult) and lost.is_error
    text = lost.content[0]
    assert isinstance(text, mcp_types.TextContent)
    assert "was lost: replica 'a:8765' held it" in text.text
    assert "codemode ledger show RUN" in text.text and "without requestState" in text.text
    # A retry after that is refused at once: the round is still answered by the first.
    again = await b.relay.forward(state, "alice", "acme", YES)
    assert isinstance(again, mcp_types.CallToolResult) and again.is_error


async def test_a_holder_that_no_longer_has_the_run_says_so_at_once(replicas: tuple[Replica, Replica]) -> None:
    a, b = replicas
    run = a.runs.create("alice", "acme", client_can_elicit=True)
    state = f"{run.token}.n1"
    await a.relay.asked(run, state, time.time() + 600)
    run.scope.cancel()  # cancelled on A (the client went away, the run idled out)
    gone: object = None
    async with anyio.create_task_group() as group:
        group.start_soon(a.relay.serve, a.next_event)
        gone = await b.relay.forward(state, "alice", "acme", YES)
        group.cancel_scope.cancel()
    assert isinstance(gone, mcp_types.CallToolResult) and gone.is_error
    text = gone.content[0]
    assert isinstance(text, mcp_types.TextContent) and "no longer has this run" in text.text
