"""The Anthropic Messages API played by the bundled tasks' scripted agents, for recording a run
through the real-model path (``--model``) where no API key exists: each request is turned back
into the conversation, the task's scripted agent picks the next turn, and the turn goes back as
a Messages API reply. The recording path, the replay file and the re-scoring are the real ones;
the replies are not a model's.

``python tests/bench/_scripted_api.py`` records ``tests/bench/fixtures/replay/`` again (see its
README).
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any, cast

import httpx

from codemode.bench import Final, Message, Mode
from codemode.bench._accounting import TiktokenTokenizer
from codemode.bench._main import run_bench
from codemode.bench._tasks import Task, load_tasks

FIXTURE = Path(__file__).parent / "fixtures" / "replay"
TASKS = ("no_tool_arithmetic", "no_tool_pasted_ticket", "small_lookup")
MODEL = "anthropic:scripted-agents"
NOTE = (
    "recorded from the scripted agents through the recording path (tests/bench/_scripted_api.py): "
    "no model wrote these replies"
)


def conversation(messages: list[dict[str, Any]]) -> list[Message]:
    """A Messages API request's messages as the runner's history (what scripted agents read)."""
    history: list[Message] = []
    names: dict[str, str] = {}
    for message in messages:
        content = message["content"]
        if message["role"] == "assistant":
            blocks = cast(list[dict[str, Any]], content)
            calls = [
                {"id": b["id"], "name": b["name"], "arguments": b["input"]}
                for b in blocks
                if b["type"] == "tool_use"
            ]
            names |= {c["id"]: c["name"] for c in calls}
            text = "".join(str(b.get("text", "")) for b in blocks if b["type"] == "text")
            history.append({"role": "assistant", "content": text, "tool_calls": calls})
        elif isinstance(content, str):
            history.append({"role": "user", "content": content})
        else:
            for block in cast(list[dict[str, Any]], content):
                history.append(
                    {
                        "role": "tool",
                        "tool_call_id": block["tool_use_id"],
                        "name": names[block["tool_use_id"]],
                        "content": block["content"],
                        "is_error": block["is_error"],
                    }
                )
    return history


class ScriptedAnthropic(httpx.BaseTransport):
    """Answers each request with the scripted agent of the task whose prompt opens it."""

    def __init__(self, tasks: list[Task]) -> None:
        self._tasks = {task.prompt: task for task in tasks}
        self._tokenizer = TiktokenTokenizer()
        self.requests = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        body: dict[str, Any] = json.loads(request.content)
        history = conversation(body["messages"])
        task = self._tasks[history[0]["content"]]
        mode: Mode = "codemode" if any(t["name"] == "run_code" for t in body["tools"]) else "direct"
        reply = task.agents[mode](history)
        content: list[dict[str, Any]]
        if isinstance(reply, Final):
            answer = reply.answer
            text = answer if isinstance(answer, str) else json.dumps(answer)
            content, stop = [{"type": "text", "text": text}], "end_turn"
        else:
            content = [{"type": "text", "text": reply.text}] if reply.text else []
            content += [
                {
                    "type": "tool_use",
                    "id": f"toolu_{self.requests:03d}_{i}",
                    "name": c.name,
                    "input": c.arguments,
                }
                for i, c in enumerate(reply.calls)
            ]
            stop = "tool_use"
        self.requests += 1
        usage = {
            "input_tokens": self._tokenizer.count(json.dumps(body)),
            "output_tokens": self._tokenizer.count(json.dumps(content)),
        }
        return httpx.Response(
            200,
            json={
                "id": f"msg_scripted_{self.requests:03d}",
                "type": "message",
                "role": "assistant",
                "model": body["model"],
                "content": content,
                "stop_reason": stop,
                "stop_sequence": None,
                "usage": usage,
            },
        )


def record(out: Path, tasks: tuple[str, ...] = TASKS, *, backend: str = "process") -> dict[str, Any]:
    """Run ``tasks`` through ``--model`` with the scripted API answering; returns results.json."""
    with tempfile.TemporaryDirectory(prefix="codemode-bench-") as scratch:
        return run_bench(
            out=out,
            tasks_dir=None,
            only=list(tasks),
            config_path=None,
            workspace=Path(scratch),
            backend="process" if backend == "process" else "docker",
            sizes=[],
            corpus=None,
            model=MODEL,
            trials=1,
            prices=(3.0, 15.0),
            command=f"codemode bench tokens --model {MODEL} --trials 1 --backend {backend}"
            + "".join(f" --task {t}" for t in tasks),
            show_progress=False,
            model_transport=ScriptedAnthropic(load_tasks(only=list(tasks))),
            recording_note=NOTE,
        )


EXPECTED_FIELDS = (
    "task",
    "mode",
    "trial",
    "input_tokens",
    "output_tokens",
    "passed",
    "refrained",
    "answer",
    "api_usage",
)
"""What a replay must reproduce exactly (not the timings)."""


def expected(results: dict[str, Any]) -> dict[str, Any]:
    return {
        "runs": [{name: run[name] for name in EXPECTED_FIELDS} for run in results["runs"]],
        "summary": {
            mode: {name: s[name] for name in ("total_tokens", "passed", "runs", "cost_usd", "refrained")}
            for mode, s in results["summary"].items()
        },
    }


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        results = record(Path(tmp))
        FIXTURE.mkdir(parents=True, exist_ok=True)
        shutil.copy(Path(tmp) / "replay.jsonl", FIXTURE / "replay.jsonl")
        text = json.dumps(expected(results), indent=1) + "\n"
        (FIXTURE / "expected.json").write_text(text, encoding="utf-8")
    print(f"recorded {len(results['runs'])} runs into {FIXTURE}", file=sys.stderr)


if __name__ == "__main__":
    main()
