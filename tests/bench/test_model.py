"""The real-model path (``--model``) against recorded API replies: no network. The transport
serves the replies in order and checks each request is what the provider's API expects; the
run's replay file then re-scores it offline."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from codemode.bench._llm import ENDPOINTS, KEYS, ModelAgent, ModelError, ModelSpec, parse_answer
from codemode.bench._main import run_bench
from codemode.bench._model import Message, Mode

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


def _mode_of(provider: str, body: dict[str, Any]) -> Mode:
    names = {t["name"] if provider == "anthropic" else t["function"]["name"] for t in body["tools"]}
    return "codemode" if "run_code" in names else "direct"


class ByMode(httpx.BaseTransport):
    """The provider's API: each mode's requests go to that mode's recorded replies."""

    def __init__(self, provider: str, recorded: dict[str, list[dict[str, Any]]]) -> None:
        self.provider = provider
        self.replays = {mode: Replay(provider, replies) for mode, replies in recorded.items()}

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        return self.replays[_mode_of(self.provider, json.loads(request.content))](request)


def _bench(out: Path, tmp: Path, *, model: str | None = None, **options: Any) -> dict[str, Any]:
    return run_bench(
        out=out,
        tasks_dir=None,
        only=["small_lookup"],
        config_path=None,
        workspace=tmp,
        backend="process",
        sizes=[],
        corpus=None,
        model=model,
        trials=1,
        prices=(3.0, 15.0),
        command="test",
        show_progress=False,
        **options,
    )


@pytest.mark.integration
@pytest.mark.parametrize("provider", ["anthropic", "openai"])
def test_recorded_model_solves_both_modes_and_replays_offline(
    provider: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The model's replies come from a transport standing in for the API; the run goes through
    the real recording path, and its replay file re-scores to the same tokens, answers and checks."""
    monkeypatch.setenv(KEYS[provider], "test-key")
    recorded = json.loads((FIXTURES / f"{provider}_small_lookup.json").read_text(encoding="utf-8"))
    api = ByMode(provider, recorded)
    out = tmp_path / "live"
    live = _bench(out, tmp_path, model=f"{provider}:test-model", model_transport=api)
    for run in live["runs"]:
        assert run["passed"], run
        assert run["mcp_calls"] == 1 and len(run["turns"]) == 2
        assert [u["input"] for u in run["api_usage"]] == [
            r["usage"]["input_tokens" if provider == "anthropic" else "prompt_tokens"]
            for r in recorded[run["mode"]]
        ]
    for mode, replay in api.replays.items():
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
    assert live["replay_file"] == "replay.jsonl"
    lines = (out / "replay.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line)["kind"] for line in lines] == ["header"] + ["exchange", "exchange", "run"] * 2
    assert "test-key" not in "".join(lines) and "Bearer" not in "".join(lines)  # bodies only

    replayed = _bench(tmp_path / "again", tmp_path, replay=out / "replay.jsonl")
    fields = ("task", "mode", "input_tokens", "output_tokens", "passed", "answer", "api_usage", "mcp_calls")
    assert [{f: r[f] for f in fields} for r in replayed["runs"]] == [
        {f: r[f] for f in fields} for r in live["runs"]
    ]
    assert replayed["definition_tokens"] == live["definition_tokens"]
    assert replayed["servers"] == live["servers"] and replayed["backend"] == live["backend"]


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
