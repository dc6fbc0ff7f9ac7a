"""The experiment's other costs: what the broker's gates made of a task's calls (valid tool-call
rate, argument-schema pass rate, denials), whether a mode refrained where the answer needs no
call, and sandbox use that is measured on Docker too."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import anyio
import pytest

from codemode.bench._accounting import TiktokenTokenizer
from codemode.bench._gates import gate_stats
from codemode.bench._suite import run_suite, write_demo_config
from codemode.bench._taskrun import TaskRun
from codemode.bench._tasks import TaskError, load_task, load_tasks
from codemode.config import demo_servers
from codemode.ledger import CallRecord


def _row(state: str, gate: str | None = None, tool: str = "list_tickets") -> CallRecord:
    return CallRecord.model_construct(server="tickets", tool=tool, state=state, gate=gate)


@pytest.mark.parametrize(
    ("rows", "valid", "schema", "denied"),
    [
        ([_row("succeeded"), _row("failed")], 1.0, 1.0, {}),  # a failed call passed the gates
        (
            [_row("succeeded"), _row("denied", "arguments"), _row("denied", "arguments")],
            0.333,
            0.333,
            {"arguments:tickets/list_tickets": 2},
        ),
        # A call the tool gate refuses never reaches the argument check: it counts for neither.
        ([_row("succeeded"), _row("denied", "tool", "nope")], 0.5, 1.0, {"tool:tickets/nope": 1}),
        ([_row("denied", "principal")], 0.0, None, {"principal:tickets/list_tickets": 1}),
        # Gates after the argument check saw arguments that passed it.
        (
            [_row("denied", "budget"), _row("denied", "consent")],
            0.0,
            1.0,
            {"budget:tickets/list_tickets": 1, "consent:tickets/list_tickets": 1},
        ),
        ([], None, None, {}),
    ],
)
def test_gate_decisions_give_the_rates(
    rows: list[CallRecord], valid: float | None, schema: float | None, denied: dict[str, int]
) -> None:
    stats = gate_stats(rows)
    run = TaskRun(task="t", mode="direct", passed=True, answer="", error=None)
    run.mcp_calls, run.calls_denied = stats.attempted, stats.denials
    run.arguments_checked, run.arguments_denied = stats.arguments_checked, stats.arguments_denied
    assert (run.valid_call_rate, run.schema_pass_rate) == (valid, schema)
    assert stats.denied == denied


def test_refraining_is_scored_against_what_the_answer_needs(tmp_path: Path) -> None:
    none, one = load_tasks(only=["no_tool_arithmetic", "small_lookup"])
    assert (none.needs_calls, one.needs_calls) == (0, 1)
    assert none.refrained(tool_calls=0, mcp_calls=0) is True
    assert none.refrained(tool_calls=1, mcp_calls=0) is False  # a search alone is a call too many
    assert one.refrained(tool_calls=2, mcp_calls=1) is True  # search + run_code making one read
    assert one.refrained(tool_calls=1, mcp_calls=2) is False
    assert load_tasks(only=["branching"])[0].refrained(tool_calls=9, mcp_calls=9) is None
    for bad in ("-1", "'none'", "1.5", "True"):
        path = tmp_path / "bad.py"
        source = none.path.read_text(encoding="utf-8").replace("NEEDS_CALLS = 0", f"NEEDS_CALLS = {bad}")
        path.write_text(source, encoding="utf-8")
        with pytest.raises(TaskError, match="NEEDS_CALLS must be a whole number of MCP calls"):
            load_task(path)


# A task whose calls the gates refuse in ways a model's calls go wrong: arguments that do not
# match the schema, a tool that does not exist, a name that is no server__tool. And a task that
# needs no call, answered after a search anyway.
DENIALS = '''
from codemode.bench import (
    Final, assistant_turns, call, json_results, run_code, run_code_value, tool_results, turn,
)

PROMPT = "How many open tickets does customer CUST-0042 have?"
NEEDS_CALLS = 1

def direct_agent(history):
    if assistant_turns(history) == 0:
        return turn(
            call("tickets__list_tickets", customer_id=5),
            call("tickets__no_such_tool"),
            call("list_tickets", customer_id="CUST-0042"),
            call("tickets__list_tickets", customer_id="CUST-0042", status="open"),
        )
    return Final(json_results(history)[3]["total"])

PROGRAM = """
from servers.tickets import list_tickets
for bad in ({"customer_id": 5}, {"limit": "many"}):
    try:
        list_tickets(**bad)
    except Exception:
        pass
list_tickets(customer_id="CUST-0042", status="open")["total"]
"""

def codemode_agent(history):
    if assistant_turns(history) == 0:
        return run_code(PROGRAM)
    return Final(run_code_value(tool_results(history)[0]))

def check(answer):
    return answer == 1
'''
OVERCALL = """
from codemode.bench import Final, assistant_turns, call, turn

PROMPT = "What is 2 + 2? Answer with the number."
NEEDS_CALLS = 0

def direct_agent(history):
    return Final(4)

def codemode_agent(history):
    if assistant_turns(history) == 0:
        return turn(call("search_tools", query="add numbers"))
    return Final(4)

def check(answer):
    return answer == 4
"""


@pytest.mark.integration
def test_gate_decisions_and_refraining_of_real_runs(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "denials.py").write_text(textwrap.dedent(DENIALS), encoding="utf-8")
    (tasks / "overcall.py").write_text(textwrap.dedent(OVERCALL), encoding="utf-8")
    config = write_demo_config(tmp_path, dict(demo_servers()))
    suite = anyio.run(
        lambda: run_suite(config, load_tasks(tasks), tokenizer=TiktokenTokenizer(), backend="process")
    )
    runs = {(r.task, r.mode): r for r in suite.runs}
    direct, code = runs["denials", "direct"], runs["denials", "codemode"]
    assert direct.passed and code.passed, (direct, code)
    got: dict[str, Any] = {
        "attempted": direct.mcp_calls,
        "denied": direct.denied,
        "checked": direct.arguments_checked,
        "rates": (direct.valid_call_rate, direct.schema_pass_rate),
    }
    assert got == {
        "attempted": 4,
        "denied": {
            "arguments:tickets/list_tickets": 1,
            "tool:tickets/no_such_tool": 1,
            "tool:/list_tickets": 1,
        },
        "checked": 2,  # the two tool-gate refusals never reached the argument check
        "rates": (0.25, 0.5),
    }
    assert (code.mcp_calls, code.calls_denied, code.denied) == (3, 2, {"arguments:tickets/list_tickets": 2})
    assert (code.valid_call_rate, code.schema_pass_rate) == (0.333, 0.333)
    assert direct.refrained is False and code.refrained is False  # 4 and 3 calls tried where one would do
    assert runs["overcall", "direct"].refrained is True
    overcall = runs["overcall", "codemode"]
    assert overcall.passed and overcall.refrained is False and overcall.mcp_calls == 0
    assert overcall.discovery_s > 0 and overcall.execution_s == 0.0


@pytest.mark.docker
def test_sandbox_use_is_measured_on_docker(tmp_path: Path, docker_image: str) -> None:
    """A container is no child process of codemode: the figures come from the run's own
    accounting, so they are there on Docker as on the local backends."""
    config = write_demo_config(tmp_path, dict(demo_servers()))
    suite = anyio.run(
        lambda: run_suite(
            config,
            load_tasks(only=["small_lookup"]),
            tokenizer=TiktokenTokenizer(),
            backend="docker",
            modes=("codemode",),
        )
    )
    assert suite.backend == "docker"
    (run,) = suite.runs
    assert run.passed, run
    assert run.sandbox_cpu_s is not None and run.sandbox_cpu_s > 0
    assert run.sandbox_peak_mb is not None and run.sandbox_peak_mb > 0
    assert run.channel_in_bytes is not None and run.channel_in_bytes > 0
