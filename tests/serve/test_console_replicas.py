"""Several serve replicas on one ledger share one approval desk: a call that waits for approval
on replica A is listed by replica B's console and answered there, the answer reaches A's run, a
second answer is told who answered first, and each operator still sees only their tenants. Each
"replica" is a console kit (a desk and a console) with a ledger handle of its own, on one SQLite
file or one PostgreSQL database."""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest

from codemode.broker import ApprovalAnswer, ApprovalRequest
from codemode.ledger import open_ledger
from codemode.serve.console._desk import ApprovalDesk, DeskApprover, DeskError
from codemode.serve.console._scope import ALL_TENANTS
from tests.ledger._pg import PostgresServer

from ._console_kit import (
    ACME_OPS,
    OPERATOR,
    Kit,
    console_kit,
    csrf_of,
    desk_on_ledger,
    request_for,
    until_pending,
)

pytestmark = pytest.mark.anyio

ACME_CALL = "run_00000000000000aa/0"
GLOBEX_CALL = "run_00000000000000bb/0"


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def ledger_at(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """Where the replicas' one ledger is: a SQLite file, or a PostgreSQL database of its own."""
    if request.param == "sqlite":
        yield str(tmp_path / "shared.db")
        return
    server: PostgresServer = request.getfixturevalue("postgres_server")
    name = server.new_database()
    yield server.url(name)
    server.drop_database(name)


@asynccontextmanager
async def two_replicas(tmp_path: Path, ledger_at: str) -> AsyncGenerator[tuple[Kit, Kit]]:
    async with (
        console_kit(tmp_path / "a", ledger_at=ledger_at, replica="a:8765") as a,
        console_kit(tmp_path / "b", ledger_at=ledger_at, replica="b:8765") as b,
    ):
        yield a, b


async def _ask(desk: ApprovalDesk, request: ApprovalRequest, answers: dict[str, ApprovalAnswer]) -> None:
    answers[request.call_id] = await DeskApprover(desk, None).ask(request)


async def _answered(answers: dict[str, ApprovalAnswer], call_id: str) -> ApprovalAnswer:
    with anyio.fail_after(10):  # the asking replica reads the answer off the ledger
        while call_id not in answers:
            await anyio.sleep(0.01)
    return answers[call_id]


async def _post_answer(
    kit: Kit, who: dict[str, str], call_id: str, decision: str = "approve", digest: str | None = None
) -> tuple[int, str]:
    csrf = csrf_of((await kit.client.get("/console", headers=who)).text)
    data = {
        "call_id": call_id,
        "args_digest": digest or request_for(call_id).args_digest,
        "decision": decision,
        "csrf_token": csrf,
    }
    response = await kit.client.post("/console/approvals", data=data, headers=who)
    return response.status_code, response.text.replace("&#39;", "'")


async def test_a_call_waiting_on_one_replica_is_approved_on_the_others_console(
    tmp_path: Path, ledger_at: str
) -> None:
    answers: dict[str, ApprovalAnswer] = {}
    async with two_replicas(tmp_path, ledger_at) as (a, b), anyio.create_task_group() as tg:
        tg.start_soon(_ask, a.desk, request_for(ACME_CALL), answers)
        await until_pending(b.desk)
        [ticket] = b.desk.pending(ALL_TENANTS)
        assert (ticket.request.call_id, ticket.replica) == (ACME_CALL, "a:8765")
        listed = await b.client.get("/console/live", headers=OPERATOR)
        assert ACME_CALL in listed.text, "B's console lists the call waiting on A"

        status, _ = await _post_answer(b, OPERATOR, ACME_CALL)
        assert status == 303
        assert await _answered(answers, ACME_CALL) == ApprovalAnswer(True, "console:ops")
        for kit in (a, b):
            assert kit.desk.pending(ALL_TENANTS) == []
            status, text = await _post_answer(kit, OPERATOR, ACME_CALL, "deny")
            assert status == 404 and "already answered by ops on replica b:8765 (approved)" in text
        held = a.ledger.approval_tickets.find(ACME_CALL)
        assert held is not None and (held.state, held.answered_on) == ("answered", "b:8765")


async def test_each_operator_answers_only_their_tenants_on_every_replica(
    tmp_path: Path, ledger_at: str
) -> None:
    answers: dict[str, ApprovalAnswer] = {}
    async with two_replicas(tmp_path, ledger_at) as (a, b), anyio.create_task_group() as tg:
        tg.start_soon(_ask, a.desk, request_for(ACME_CALL, tenant="acme"), answers)
        tg.start_soon(_ask, a.desk, request_for(GLOBEX_CALL, tenant="globex"), answers)
        await until_pending(b.desk, 2)

        scoped = (await b.client.get("/console/live", headers=ACME_OPS)).text
        assert ACME_CALL in scoped and GLOBEX_CALL not in scoped and "globex" not in scoped
        # Another tenant's ticket on another replica is refused exactly like one that is not there.
        other = await _post_answer(b, ACME_OPS, GLOBEX_CALL)
        missing = await _post_answer(b, ACME_OPS, "run_ffffffffffffffff/0")
        assert other[0] == missing[0] == 404
        assert other[1].replace(GLOBEX_CALL, "X") == missing[1].replace("run_ffffffffffffffff/0", "X")
        assert len(a.desk.pending(ALL_TENANTS)) == 2, "the refused answer left the ticket open"

        assert (await _post_answer(b, ACME_OPS, ACME_CALL))[0] == 303
        assert (await _post_answer(b, OPERATOR, GLOBEX_CALL, "deny"))[0] == 303
        assert await _answered(answers, ACME_CALL) == ApprovalAnswer(True, "console:acme-ops")
        denied = await _answered(answers, GLOBEX_CALL)
        assert denied.approved is False and "denied by operator ops in the console" in denied.reason


async def test_a_client_answer_on_the_asking_replica_withdraws_the_ticket_everywhere(
    tmp_path: Path, ledger_at: str
) -> None:
    user_answers = anyio.Event()

    class Client:
        async def ask(self, request: object) -> ApprovalAnswer:
            await user_answers.wait()
            return ApprovalAnswer(False, "mcp-client", "the user chose decline")

    got: list[ApprovalAnswer] = []

    async def asking(desk: ApprovalDesk) -> None:
        got.append(await DeskApprover(desk, Client()).ask(request_for(ACME_CALL)))

    async with two_replicas(tmp_path, ledger_at) as (a, b):
        async with anyio.create_task_group() as tg:
            tg.start_soon(asking, a.desk)
            await until_pending(b.desk)
            user_answers.set()
        assert got == [ApprovalAnswer(False, "mcp-client", "the user chose decline")]
        assert b.desk.pending(ALL_TENANTS) == []
        status, text = await _post_answer(b, OPERATOR, ACME_CALL)
        assert status == 404 and "no approval is pending" in text
        held = a.ledger.approval_tickets.find(ACME_CALL)
        assert held is not None and held.state == "withdrawn"
        assert a.ledger.verify().ok


async def test_a_client_refusal_wins_over_an_operator_approval_given_at_the_same_moment(
    tmp_path: Path, ledger_at: str
) -> None:
    got: list[ApprovalAnswer] = []

    async with two_replicas(tmp_path, ledger_at) as (a, b):

        class Client:
            async def ask(self, request: object) -> ApprovalAnswer:
                await until_pending(b.desk)
                # An operator on B approves just before the user's "no" reaches A.
                assert (await _post_answer(b, OPERATOR, ACME_CALL))[0] == 303
                return ApprovalAnswer(False, "mcp-client", "the user chose decline")

        got.append(await DeskApprover(a.desk, Client()).ask(request_for(ACME_CALL)))
    assert got == [ApprovalAnswer(False, "mcp-client", "the user chose decline")]


async def test_a_dead_replicas_ticket_is_not_listed_or_answerable_after_its_expiry(tmp_path: Path) -> None:
    now = [time.time()]
    request = request_for(ACME_CALL, ttl=60)
    with desk_on_ledger(tmp_path, replica="a:8765") as dying:
        dying.open(request)  # its run waits ... and the replica is gone without closing it
    with desk_on_ledger(tmp_path, clock=lambda: now[0], replica="b:8765") as survivor:
        assert [t.replica for t in survivor.pending(ALL_TENANTS)] == ["a:8765"]
        now[0] = request.expires_at
        assert survivor.pending(ALL_TENANTS) == []
        with pytest.raises(DeskError) as refused:
            survivor.answer(ACME_CALL, request.args_digest, approve=True, operator="ops", scope=ALL_TENANTS)
        assert refused.value.status == 410 and "expired" in str(refused.value)
    with open_ledger(tmp_path / "codemode.db") as ledger:
        held = ledger.approval_tickets.find(ACME_CALL)
        assert held is not None and (held.state, held.approved) == ("expired", None)
        assert ledger.verify().ok
