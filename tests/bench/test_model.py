"""The real-model path (``--model``) against recorded API replies: no network. The transport
serves the replies in order and checks each request is what the provider's API expects."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from codemode.bench._accounting import TiktokenTokenizer
from codemode.bench._llm import ENDPOINTS, ModelAgent, ModelError, ModelSpec, parse_answer
from codemode.bench._model import Message, Mode
from codemode.bench._suite import run_suite, write_demo_config
from codemode.bench._tasks import Task, load_tasks
from codemode.config import demo_servers

FIXTURES = Path(__file__).parent / "fixtures"


class Replay:
    """Serves one mode's recorded replies in order and keeps the requests it was sent."""

    def __init__(self, provider: str, replies: list[dict[str, Any]]) -> None:
        self.provider = provider
        self.replies = list(replies)
        self.requests: list[dict[str, Any]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        assert str(request.url) == ENDPOINTS[self.provider]
        if self.provider == "anthropic":
            assert request.headers["x-api-key"] == "test-key"
        else:
            assert request.headers["authorization"] == "Bearer test-key"
        self.requests.append(json.loads(request.content))
        return httpx.Response(200, json=self.replies.pop(0))


@pytest.mark.integration
@pytest.mark.parametrize("provider", ["anthropic", "openai"])
def test_recorded_model_solves_both_modes(provider: str, tmp_path: Path) -> None:
    recorded = json.loads((FIXTURES / f"{provider}_small_lookup.json").read_text(encoding="utf-8"))
    spec = ModelSpec.parse(f"{provider}:test-model")
    replays: dict[Mode, Replay] = {}

    def agents(task: Task, mode: Mode, tools: list[dict[str, Any]]) -> ModelAgent:
        replays[mode] = Replay(provider, recorded[mode])
        client = httpx.Client(transport=httpx.MockTransport(replays[mode]))
        return ModelAgent(spec, tools, "test-key", client=client)

    config = write_demo_config(tmp_path, dict(demo_servers()))
    suite = anyio.run(
        lambda: run_suite(
            config,
            load_tasks(only=["small_lookup"]),
            tokenizer=TiktokenTokenizer(),
            backend="process",
            agents=agents,
        )
    )
    for run in suite.runs:
        assert run.passed, run
        assert run.mcp_calls == 1 and len(run.turns) == 2
        assert [u["input"] for u in run.api_usage] == [
            r["usage"]["input_tokens" if provider == "anthropic" else "prompt_tokens"]
            for r in recorded[run.mode]
        ]
    for mode, replay in replays.items():
        assert replay.replies == []  # every recorded reply was asked for
        first, second = replay.requests
        names = {t["name"] if provider == "anthropic" else t["function"]["name"] for t in first["tools"]}
        if mode == "direct":
            assert "tickets__list_tickets" in names and len(names) == 20
        else:
            assert names == {"run_code", "search_tools", "list_files", "read_file"}
        # The second request re-sends the conversation with the real tool result in it.
        assert len(second["messages"]) > len(first["messages"])
        result_text = json.dumps(second["messages"][-1])
        assert "TCK-1128" in result_text or "status: ok" in result_text


def test_model_spec_and_key() -> None:
    assert ModelSpec.parse("anthropic:claude-x") == ModelSpec("anthropic", "claude-x")
    with pytest.raises(ModelError, match="anthropic:NAME or openai:NAME"):
        ModelSpec.parse("gemini:pro")
    with pytest.raises(ModelError, match="OPENAI_API_KEY"):
        ModelSpec.parse("openai:gpt").key({})
    assert ModelSpec.parse("openai:gpt").key({"OPENAI_API_KEY": "k"}) == "k"


def test_api_error_fails_the_task_not_the_suite() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        return httpx.Response(401, json={"error": "invalid x-api-key"})

    agent = ModelAgent(
        ModelSpec("anthropic", "m"), [], "bad", client=httpx.Client(transport=httpx.MockTransport(refuse))
    )
    history: list[Message] = [{"role": "user", "content": "hi"}]
    with pytest.raises(ModelError, match="401"):
        agent(history)


def test_parse_answer() -> None:
    assert parse_answer('Here: {"a": 1} done') == {"a": 1}
    assert parse_answer("The answer is 1.") == 1
    assert parse_answer("Customer CUST-0042 has 1 open ticket.") == 1
    assert parse_answer("no numbers") == "no numbers"
