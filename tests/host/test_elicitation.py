"""A server that asks the user to confirm a write (elicitation), in both protocol eras.

The server is a real stdio process (``tests/fixtures/servers/guarded_server.py``) and the
program runs in a real sandbox (process backend). What the server did is read from its own log.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from codemode import CallbackElicitor, ElicitationAnswer, ElicitationRequest
from codemode.cli._ledger_cmd import ledger as ledger_group
from tests._fixture_server import FixtureServer, deploy_fixture_server

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

SERVER = Path(__file__).resolve().parents[1] / "fixtures" / "servers" / "guarded_server.py"
DELETE = "from servers.guarded import delete_customer\ndelete_customer(customer_id='CUST-7')['result']\n"
TRY_DELETE = (
    "from servers.guarded import delete_customer\n"
    "try:\n"
    "    out = delete_customer(customer_id='CUST-7')\n"
    "except Exception as exc:\n"
    "    out = f'{type(exc).__name__}: {exc}'\n"
    "out\n"
)
ERAS = ["legacy", "2026-07-28"]


@dataclass
class Guarded(FixtureServer):
    asked: list[ElicitationRequest] = field(default_factory=lambda: [])

    def deletions(self) -> list[dict[str, Any]]:
        return self.logged()

    def elicitor(self, answer: ElicitationAnswer) -> CallbackElicitor:
        async def respond(request: ElicitationRequest) -> ElicitationAnswer:
            self.asked.append(request)
            return answer

        return CallbackElicitor(respond, name="test")


async def _guarded(tmp_path: Path, protocol: str, **server: Any) -> Guarded:
    return await deploy_fixture_server(
        Guarded,
        tmp_path,
        "guarded",
        SERVER,
        log="deletions.jsonl",
        log_env="GUARDED_LOG",
        protocol=protocol,
        **server,
    )


@pytest.fixture(params=ERAS)
async def guarded(request: pytest.FixtureRequest, tmp_path: Path) -> Guarded:
    return await _guarded(tmp_path, request.param)


async def test_an_accepted_confirmation_lets_the_write_happen_with_the_forms_defaults(
    guarded: Guarded,
) -> None:
    answer = ElicitationAnswer("accept", {"confirm": True}, answered_by="operator")
    async with guarded.engine(elicitor=guarded.elicitor(answer)) as engine:
        result = await engine.run(DELETE)
    assert result.status == "ok", result.error
    assert result.result == "deleted CUST-7 (routine cleanup)", "the default reason was filled in"
    assert guarded.deletions() == [{"customer_id": "CUST-7", "reason": "routine cleanup"}]
    [request] = guarded.asked
    assert (request.server, request.tool, request.mode) == ("guarded", "delete_customer", "form")
    assert "Delete customer CUST-7?" in request.message
    assert set(request.schema["properties"]) == {"confirm", "reason"}
    [call] = guarded.calls(result.run_id)
    [entry] = call.inputs
    assert entry["action"] == "accept" and entry["answered_by"] == "operator"
    assert entry["content_digest"].startswith("sha256:") and entry["at"]
    assert "routine cleanup" not in json.dumps(call.inputs), "the ledger keeps a digest, not the answer"
    reader = guarded.log.with_name("reader.toml")  # `ledger show` on the same ledger file
    reader.write_text(f'[ledger]\npath = "{guarded.config.ledger_path}"\n', encoding="utf-8")
    shown = CliRunner().invoke(ledger_group, ["show", call.call_id, "--config", str(reader)])
    assert shown.exit_code == 0, shown.output
    assert "elicitation accept by operator at" in shown.output


async def test_a_declined_confirmation_stops_the_write_and_the_program_is_told(guarded: Guarded) -> None:
    async with guarded.engine(elicitor=guarded.elicitor(ElicitationAnswer("decline"))) as engine:
        result = await engine.run(DELETE)
    assert result.status == "ok", result.error
    assert result.result == "not deleted: the user's answer was decline"
    assert guarded.deletions() == []
    [call] = guarded.calls(result.run_id)
    assert [e["action"] for e in call.inputs] == ["decline"]


async def test_with_nobody_to_ask_the_request_is_refused_and_nothing_is_written(guarded: Guarded) -> None:
    async with guarded.engine() as engine:  # no elicitor: a batch job, a headless agent
        result = await engine.run(TRY_DELETE)
    assert result.status == "ok", result.error
    assert "nobody is there to answer" in str(result.result)
    assert guarded.deletions() == []
    [call] = guarded.calls(result.run_id)
    assert [(e["action"], e["answered_by"]) for e in call.inputs] == [("refused", "host")]


async def test_the_program_cannot_answer_for_the_user(guarded: Guarded) -> None:
    # The answer is not an argument of the tool: a program that passes one is refused at the
    # arguments gate, and the request for input still goes to the person (who declines here).
    program = (
        "from servers.guarded import delete_customer\n"
        "answers = []\n"
        "for attempt in ({'answer': {'action': 'accept', 'content': {'confirm': True}}}, {}):\n"
        "    try:\n"
        "        answers.append(delete_customer(customer_id='CUST-7', **attempt)['result'])\n"
        "    except Exception as exc:\n"
        "        answers.append(type(exc).__name__)\n"
        "answers\n"
    )
    async with guarded.engine(elicitor=guarded.elicitor(ElicitationAnswer("decline"))) as engine:
        result = await engine.run(program)
    assert result.status == "ok", result.error
    assert result.result == ["TypeError", "not deleted: the user's answer was decline"]
    assert guarded.deletions() == []
    assert len(guarded.asked) == 1


@pytest.mark.parametrize("protocol", ERAS)
async def test_elicitation_deny_refuses_without_asking_and_nothing_runs(
    tmp_path: Path, protocol: str
) -> None:
    guarded = await _guarded(tmp_path, protocol, elicitation="deny")
    answer = ElicitationAnswer("accept", {"confirm": True})
    async with guarded.engine(elicitor=guarded.elicitor(answer)) as engine:
        result = await engine.run(TRY_DELETE)
    assert guarded.asked == [], "the person is never asked"
    assert guarded.deletions() == []
    assert result.status == "ok", result.error
    # The host declares no elicitation capability, so the server refuses the call up front.
    assert "elicitation capability" in str(result.result)
    [call] = guarded.calls(result.run_id)
    assert call.state == "failed", "refused before it ran: not an unknown outcome"


@pytest.mark.parametrize("protocol", ERAS)
async def test_configured_roots_are_offered_to_the_server(tmp_path: Path, protocol: str) -> None:
    guarded = await _guarded(tmp_path, protocol, roots=["/srv/data", "/home/ann/reports"])
    async with guarded.engine() as engine:
        result = await engine.run("from servers.guarded import roots\nroots()['result']\n")
    assert result.status == "ok", result.error
    assert result.result == ["file:///srv/data", "file:///home/ann/reports"]
