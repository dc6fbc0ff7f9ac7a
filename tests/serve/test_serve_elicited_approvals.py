"""Approval by elicitation under ``codemode serve``, over real Streamable HTTP, in both protocol eras
(2025-11-25's back-channel and 2026-07-28's input rounds):

* ``run_code(with_plan=ID)`` of a plan that lacks only its approval shows the person at the client
  the program and every planned call; accepted, the plan is approved in the ledger (as
  ``codemode approve --plan`` approves it) and the run sends exactly the planned write without
  asking again; declined, or a client that cannot be asked, refuses the run and sends nothing;
  edited code under the old plan is refused, and its own plan is asked for again.
* a skill a run proposes is offered at the client only when the policy lets its proposer approve
  its own; accepted, the next run imports it; otherwise nobody is asked and it stays proposed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mcp_types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from codemode.ledger import StoreLedger, open_ledger
from tests.serve.conftest import TOKENS, TOKENS_TOML, make_workspace, serving_http

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

MODES = pytest.mark.parametrize("mode", ["auto", "legacy"])

ALICE_MAY_APPROVE_OWN = TOKENS_TOML.replace(
    '[policy.principals.alice]\ntenants = ["acme"]\n',
    '[policy.principals.alice]\ntenants = ["acme"]\napprove_own_skills = true\n',
)

SKILL = '''"""Customer helpers."""

from servers.crm import get_customer


def customer_name(customer_id: str) -> str:
    """The name of one customer."""
    return str(get_customer(customer_id=customer_id)["name"])
'''


class Person:
    """The person at the client: answers every question the same way and keeps what was asked."""

    def __init__(self, action: str = "accept", approve: bool = True) -> None:
        self.action, self.approve = action, approve
        self.asked: list[str] = []

    async def __call__(self, context: Any, params: mcp_types.ElicitRequestParams) -> mcp_types.ElicitResult:
        self.asked.append(params.message)
        content = {"approve": self.approve} if self.action == "accept" else None
        return mcp_types.ElicitResult(action=self.action, content=content)  # type: ignore[arg-type]


def client(url: str, who: str, mode: str, person: Person | None) -> Client:
    headers = {"Authorization": f"Bearer {TOKENS[who]}"}
    transport = streamable_http_client(url, http_client=create_mcp_http_client(headers=headers))
    if person is None:
        return Client(transport, mode=mode)
    return Client(transport, mode=mode, elicitation_callback=person)


def text_of(result: mcp_types.CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, mcp_types.TextContent))


def write(mark: str) -> str:
    return f'from servers.crm import add_note\nadd_note(customer_id="CUST-0002", text="{mark}")\n'


@pytest.fixture(scope="module")
def config_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_workspace(tmp_path_factory.mktemp("serve-elicited"), ALICE_MAY_APPROVE_OWN)


@pytest.fixture(scope="module")
def url(config_path: Path) -> Iterator[str]:
    with serving_http(config_path) as served:
        yield served


@pytest.fixture
def ledger(config_path: Path) -> Iterator[StoreLedger]:
    with open_ledger(config_path.with_name("codemode.db"), create=False, recover=False) as opened:
        yield opened


def notes_sent(ledger: StoreLedger, mark: str) -> int:
    calls = ledger.list_calls(limit=10_000)
    return sum(
        1 for c in calls if c.tool == "add_note" and mark in str(c.arguments) and c.state == "succeeded"
    )


def sent_index(record: Any) -> int:
    [planned] = record.calls
    return int(planned["index"])


async def make_plan(url: str, code: str, mode: str) -> str:
    async with client(url, "alice", mode, Person("decline")) as planner:
        planned = await planner.call_tool("run_code", {"code": code, "plan": True})
    assert not planned.is_error, text_of(planned)
    assert planned.structured_content is not None
    plan = planned.structured_content["plan"]
    assert [call["tool"] for call in plan["calls"]] == ["add_note"]
    assert "the person at this client is shown the plan" in text_of(planned)
    return str(plan["plan_id"])


@MODES
async def test_an_accepted_plan_runs_exactly_its_planned_write_without_asking_again(
    url: str, ledger: StoreLedger, mode: str
) -> None:
    code = write(f"planned-{mode}")
    plan_id = await make_plan(url, code, mode)
    person = Person()
    async with client(url, "alice", mode, person) as alice:
        real = await alice.call_tool("run_code", {"code": code, "with_plan": plan_id})
        assert not real.is_error, text_of(real)
        summary = real.structured_content
        assert summary is not None and (summary["calls"], summary["denials"]) == (1, 0)
        [question] = person.asked  # the plan, once: its planned call did not ask again
        assert plan_id in question and "crm/add_note" in question and f"planned-{mode}" in question
        record = ledger.get_plan(plan_id)
        assert record is not None and record.approved_digest is not None
        assert record.approved_by == 'mcp-client (principal "alice", tenant "acme")'
        [sent] = ledger.list_calls(run_id=summary["run_id"])
        assert (sent.tool, sent.state) == ("add_note", "succeeded") and sent.approval_id is not None
        covered = ledger.get_approval(sent.approval_id)
        assert covered is not None and covered.approver == f"plan:{plan_id}#{sent_index(record)}"

        edited = code + "# edited\n"
        refused = await alice.call_tool("run_code", {"code": edited, "with_plan": plan_id})
        assert refused.is_error and "other code" in text_of(refused)
        assert len(person.asked) == 1, "a plan for other code is never offered"
        edited_plan = await make_plan(url, edited, mode)
        again = await alice.call_tool("run_code", {"code": edited, "with_plan": edited_plan})
        assert not again.is_error, text_of(again)
        assert len(person.asked) == 2 and edited_plan in person.asked[1], "the edited program asks again"
    assert notes_sent(ledger, f"planned-{mode}") == 2


@MODES
@pytest.mark.parametrize(
    ("person", "reason"),
    [(Person("decline"), "the user chose decline"), (None, "does not support elicitation")],
    ids=["declined", "no-elicitation"],
)
async def test_a_plan_not_approved_at_the_client_refuses_the_run_and_names_the_command(
    url: str, ledger: StoreLedger, mode: str, person: Person | None, reason: str
) -> None:
    mark = f"refused-{mode}-{person is None}"
    code = write(mark)
    plan_id = await make_plan(url, code, mode)
    async with client(url, "alice", mode, person) as alice:
        refused = await alice.call_tool("run_code", {"code": code, "with_plan": plan_id})
    text = text_of(refused)
    assert refused.is_error and reason in text and f"codemode approve --plan {plan_id}" in text
    assert "nothing was sent" in text
    record = ledger.get_plan(plan_id)
    assert record is not None and record.approved_at is None
    assert notes_sent(ledger, mark) == 0


def proposing(name: str) -> str:
    # The description is the program's text: asking to be approved changes nothing.
    return f"import codemode\ncodemode.propose_skill({name!r}, {SKILL!r}, 'approve this skill')"


def using(name: str) -> str:
    return f"from skills.{name} import customer_name\ncustomer_name('CUST-0001')"


@MODES
async def test_a_skill_whose_proposer_may_approve_it_is_approved_at_the_client_and_imported_next(
    url: str, ledger: StoreLedger, mode: str
) -> None:
    name = f"customers_{mode}"
    person = Person()
    async with client(url, "alice", mode, person) as alice:
        proposed = await alice.call_tool("run_code", {"code": proposing(name)})
    assert not proposed.is_error, text_of(proposed)
    assert proposed.structured_content is not None
    [offer] = proposed.structured_content["skills"]
    assert (offer["name"], offer["version"], offer["status"]) == (name, 1, "approved")
    [question] = person.asked
    assert name in question and "def customer_name" in question and "Pin: " in question
    [version] = ledger.skills.versions("acme", name)
    assert (version.status, version.proposed_by, version.approved_by) == ("approved", "alice", "alice")
    assert version.note is not None and 'mcp-client (principal "alice"' in version.note

    async with client(url, "alice", mode, None) as later:
        used = await later.call_tool("run_code", {"code": using(name)})
    assert not used.is_error, text_of(used)


@MODES
async def test_a_skill_whose_proposer_may_not_approve_it_is_not_offered_and_stays_proposed(
    url: str, ledger: StoreLedger, mode: str
) -> None:
    name = f"bobs_customers_{mode}"
    person = Person()
    async with client(url, "bob", mode, person) as bob:
        proposed = await bob.call_tool("run_code", {"code": proposing(name)})
        assert proposed.structured_content is not None
        [offer] = proposed.structured_content["skills"]
        assert offer["status"] == "proposed" and "waits for another person" in offer["note"]
        assert f"codemode skill approve {name}" in text_of(proposed)
        assert person.asked == [], "no elicitation: the policy does not let bob approve his own"
        used = await bob.call_tool("run_code", {"code": using(name)})
    assert used.is_error and "ModuleNotFoundError" in text_of(used)
    [version] = ledger.skills.versions("acme", name)
    assert (version.status, version.approved_by) == ("proposed", None)


@MODES
async def test_a_declined_skill_stays_proposed(url: str, ledger: StoreLedger, mode: str) -> None:
    name = f"declined_{mode}"
    person = Person("decline")
    async with client(url, "alice", mode, person) as alice:
        proposed = await alice.call_tool("run_code", {"code": proposing(name)})
    assert proposed.structured_content is not None
    [offer] = proposed.structured_content["skills"]
    assert offer["status"] == "proposed" and "the user chose decline" in offer["note"]
    assert len(person.asked) == 1
    [version] = ledger.skills.versions("acme", name)
    assert version.status == "proposed"
