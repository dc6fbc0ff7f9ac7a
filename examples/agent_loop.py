"""A model loop that uses only codemode's `run_code` tool, against the bundled example servers
or the servers of your own config.

    python examples/agent_loop.py                 # offline: a scripted model plays the agent
    ANTHROPIC_API_KEY=... python examples/agent_loop.py --model claude-sonnet-4-5
    OPENAI_API_KEY=... python examples/agent_loop.py --model gpt-4.1
    python examples/agent_loop.py --config codemode.toml --model gpt-4.1 --task "..."

Without --config, a temporary workspace runs the bundled docs, crm and tickets servers (as
`codemode init --demo`, `sync` and `pin --approve` set them up). With --config, your servers,
pins, policy and sandbox backend are used as they are: run `codemode sync` and `codemode pin
--approve` first. The scripted model knows only the bundled servers' task.

The model is given ONE tool definition (`CodeMode.tool_definition(...)`); every tool call it
makes goes through `CodeMode.handle_tool_call(...)`, i.e. a sandboxed program whose stub calls
pass the broker. The loop is ordinary: send messages, execute tool calls, append results.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path
from typing import Any, Protocol, cast

import anyio

from codemode import CodeMode, ToolFormat

TASK = (
    "Which three customers have the most open tickets, and what are their company names and "
    "segments? Answer in one short paragraph."
)

Message = dict[str, Any]


class Model(Protocol):
    """A chat model: takes the conversation and the tool definitions, returns the next message."""

    api: ToolFormat

    async def __call__(self, messages: list[Message], tools: list[dict[str, Any]]) -> Message: ...


# -- the models ------------------------------------------------------------------------------------


class ScriptedModel:
    """Plays a competent agent without any network: explore, run one program, answer."""

    api: ToolFormat = "anthropic"

    def __init__(self) -> None:
        self.turn = 0

    async def __call__(self, messages: list[Message], tools: list[dict[str, Any]]) -> Message:
        assert [t["name"] for t in tools] == ["run_code"], "the model sees exactly one tool"
        self.turn += 1
        if self.turn == 1:
            program = (
                "import servers.tickets as t, servers.crm as c\n"
                "[n for n in dir(t) if not n.startswith('_')] + [n for n in dir(c) if not n.startswith('_')]"
            )
            return _tool_use("explore", program)
        if self.turn == 2:
            program = (
                "from servers.tickets import list_tickets\n"
                "from servers.crm import get_customer\n"
                "tickets, cursor = [], None\n"
                "while True:\n"
                "    page = list_tickets(status='open', limit=100, cursor=cursor)\n"
                "    tickets += page['tickets']\n"
                "    cursor = page['next_cursor']\n"
                "    if cursor is None: break\n"
                "counts = {}\n"
                "for ticket in tickets:\n"
                "    counts[ticket['customer_id']] = counts.get(ticket['customer_id'], 0) + 1\n"
                "top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:3]\n"
                "rows = []\n"
                "for cid, n in top:\n"
                "    customer = get_customer(customer_id=cid)\n"
                "    rows.append({'company': customer['company'], 'segment': customer['segment'],\n"
                "                 'open': n})\n"
                "rows"
            )
            return _tool_use("answer", program)
        data = json.loads(_last_tool_result(messages).split("not instructions ---\n", 1)[1])
        parts = [f"{row['company']} ({row['segment']}, {row['open']} open tickets)" for row in data]
        return {
            "role": "assistant",
            "content": [{"type": "text", "text": "Most open tickets: " + "; ".join(parts) + "."}],
        }


async def post_json(url: str, headers: dict[str, str], body: dict[str, Any]) -> Any:
    """POST JSON with the standard library (in a thread), so the example needs no HTTP package."""

    def send() -> Any:
        request = urllib.request.Request(  # noqa: S310 - fixed https URLs
            url, data=json.dumps(body).encode(), headers={**headers, "content-type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=120) as response:  # noqa: S310 - fixed https URLs
            return json.loads(response.read())

    return await anyio.to_thread.run_sync(send)


class AnthropicModel:
    api: ToolFormat = "anthropic"

    def __init__(self, model: str, key: str) -> None:
        self.model, self.key = model, key

    async def __call__(self, messages: list[Message], tools: list[dict[str, Any]]) -> Message:
        body = await post_json(
            "https://api.anthropic.com/v1/messages",
            {"x-api-key": self.key, "anthropic-version": "2023-06-01"},
            {"model": self.model, "max_tokens": 2048, "tools": tools, "messages": messages},
        )
        return {"role": "assistant", "content": body["content"]}


class OpenAIModel:
    api: ToolFormat = "openai"

    def __init__(self, model: str, key: str) -> None:
        self.model, self.key = model, key

    async def __call__(self, messages: list[Message], tools: list[dict[str, Any]]) -> Message:
        body = await post_json(
            "https://api.openai.com/v1/chat/completions",
            {"authorization": f"Bearer {self.key}"},
            {"model": self.model, "tools": tools, "messages": messages},
        )
        return body["choices"][0]["message"]


def _tool_use(call_id: str, code: str) -> Message:
    return {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": call_id, "name": "run_code", "input": {"code": code}}],
    }


def _last_tool_result(messages: list[Message]) -> str:
    for message in reversed(messages):
        content = message.get("content")
        if not isinstance(content, list):
            continue  # a plain-text message
        for block in cast(list[object], content):
            if not isinstance(block, dict):
                continue
            fields = cast(dict[str, Any], block)
            if fields.get("type") == "tool_result":
                return str(fields["content"])
    raise RuntimeError("no tool result yet")


# -- the loop ------------------------------------------------------------------------------------


async def agent(
    engine: CodeMode, model: Model, *, task: str = TASK, max_turns: int = 8, verbose: bool = True
) -> str:
    api = model.api
    tools = [engine.tool_definition(api)]
    messages: list[Message] = [{"role": "user", "content": task}]
    for _ in range(max_turns):
        reply = await model(messages, tools)
        messages.append(reply)
        if api == "openai":
            calls: list[dict[str, Any]] = reply.get("tool_calls") or []
            if not calls:
                return str(reply.get("content") or "")
            for call in calls:
                result = await engine.handle_tool_call(
                    call["function"]["name"], call["function"]["arguments"]
                )
                _show(verbose, call["function"]["name"], result.text)
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": result.text})
            continue
        uses = [b for b in reply["content"] if b.get("type") == "tool_use"]
        if not uses:
            return "".join(b.get("text", "") for b in reply["content"] if b.get("type") == "text")
        results = []
        for use in uses:
            result = await engine.handle_tool_call(use["name"], use["input"])
            _show(verbose, use["name"], result.text)
            results.append(
                {
                    "type": "tool_result",
                    "tool_use_id": use["id"],
                    "content": result.text,
                    "is_error": result.is_error,
                }
            )
        messages.append({"role": "user", "content": results})
    raise RuntimeError(f"no answer after {max_turns} turns")


def _show(verbose: bool, name: str, text: str) -> None:
    if verbose:
        print(f"--- {name} ->\n{text[:1200]}\n", file=sys.stderr)


def prepare_workspace(directory: Path) -> Path:
    """`codemode init --demo`, `sync`, `pin --approve`: the bundled servers, reviewed and pinned.
    The sandbox backend is the starter config's (`auto`), as for any new config."""
    config = directory / "codemode.toml"
    codemode = [sys.executable, "-m", "codemode.cli"]
    subprocess.run([*codemode, "init", "--demo", "--config", str(config)], check=True, capture_output=True)
    subprocess.run([*codemode, "sync", "--config", str(config)], check=True, capture_output=True)
    subprocess.run([*codemode, "pin", "--approve", "--config", str(config)], check=True, capture_output=True)
    return config


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", help="A model name; needs ANTHROPIC_API_KEY (claude-*) or OPENAI_API_KEY.")
    parser.add_argument(
        "--config",
        type=Path,
        help="Your codemode.toml (synced and approved); its sandbox backend runs the programs "
        "[default: the bundled example servers in a temporary workspace].",
    )
    parser.add_argument(
        "--task", default=TASK, help="What to ask the model [default: the bundled servers' task]."
    )
    parser.add_argument("--quiet", action="store_true", help="Print only the final answer.")
    args = parser.parse_args()
    if args.config is not None and not args.config.is_file():
        parser.error(f"--config {args.config}: no such file (make one with 'codemode init')")
    if args.model and args.model.startswith("claude") and os.environ.get("ANTHROPIC_API_KEY"):
        model: Model = AnthropicModel(args.model, os.environ["ANTHROPIC_API_KEY"])
    elif args.model and os.environ.get("OPENAI_API_KEY"):
        model = OpenAIModel(args.model, os.environ["OPENAI_API_KEY"])
    else:
        if args.model:
            print("no API key for that model in the environment; using the scripted model", file=sys.stderr)
        model = ScriptedModel()
        if args.config is not None or args.task != TASK:
            print(
                "the scripted model plays only the bundled servers' task (tickets and crm); "
                "give --model for another task or your own servers",
                file=sys.stderr,
            )
    with tempfile.TemporaryDirectory(prefix="codemode-agent-") as workdir:
        config = args.config or prepare_workspace(Path(workdir))
        async with CodeMode.from_file(config) as engine:
            # Always said (stderr), so that a run shows which sandbox held the model's programs.
            print(f"sandbox backend: {engine.backend} (from {config})", file=sys.stderr)
            answer = await agent(engine, model, task=args.task, verbose=not args.quiet)
    print(answer)


if __name__ == "__main__":
    anyio.run(main)
