"""The argument gate against hostile regular expressions in a pinned schema (issue 36, class 2).

Python's ``re`` backtracks: ``^([a-z]+)+$`` against 29 letters and a ``!`` held the event loop
for 11-13 s. Patterns are now searched by RE2 (decided at once, whatever the pattern), and the
few RE2 cannot run go to a separate process that is killed at the time limit. The tests marked
integration start that process.
"""

from __future__ import annotations

import random
import sys
from collections.abc import Callable
from typing import Any

import anyio
import pytest

from codemode import _schema_isolation as schema_isolation
from codemode._json_schema import SchemaCheck, compiled_validator
from codemode._safe_regex import NeedsIsolation, regex_budget, search
from codemode.broker._decisions import Allow, Deny
from codemode.broker._facts import Facts
from codemode.broker.gates import ArgumentGate
from tests._regex_schemas import (
    HOSTILE,
    count_separate_processes,
    in_key,
    in_property_names,
    in_string,
    schema_workers,
)
from tests.broker._gate_calls import context, policy, spec

pytestmark = pytest.mark.anyio

CATASTROPHIC = ["^([a-z]+)+$", "^(a|a)*$", "(a|aa)+$", "^(a+)+$", "^(\\w+\\s?)*$"]
"""Seconds (a minute, for some) of backtracking in Python's re against :data:`HOSTILE`."""


def in_items(pattern: str) -> dict[str, Any]:
    items = {"type": "array", "items": {"type": "string", "pattern": pattern}}
    return {"type": "object", "properties": {"x": items}}


def as_key(text: str) -> Any:
    return {text: 1}


def in_list(text: str) -> Any:
    return ["aaa", text]


def itself(text: str) -> Any:
    return text


PLACES: dict[str, tuple[Callable[[str], dict[str, Any]], Callable[[str], Any]]] = {
    "pattern": (in_string, itself),
    "patternProperties": (in_key, as_key),
    "propertyNames": (in_property_names, as_key),
    "items": (in_items, in_list),
}


async def decide(schema: dict[str, Any], arguments: dict[str, Any], gate: ArgumentGate | None = None) -> Any:
    gate = gate or ArgumentGate(policy())
    tool = spec(schema=schema)
    return await gate.check(context(tool, arguments), Facts(pinned={"inputSchema": schema}))


@pytest.fixture
def no_separate_process(monkeypatch: pytest.MonkeyPatch) -> None:
    async def refuse(*_args: Any) -> Any:
        raise AssertionError("RE2 runs these patterns: no separate process may start")

    monkeypatch.setattr("codemode._schema_isolation._in_separate_process", refuse)


@pytest.mark.usefixtures("no_separate_process")
@pytest.mark.parametrize("pattern", CATASTROPHIC)
@pytest.mark.parametrize("place", list(PLACES))
async def test_a_catastrophic_pattern_is_decided_at_once_wherever_it_is(place: str, pattern: str) -> None:
    shape, value = PLACES[place]
    refused = await decide(shape(pattern), {"x": value(HOSTILE)})
    assert isinstance(refused, Deny), refused
    assert "took longer" not in refused.reason
    assert "does not match" in refused.reason or "do not match" in refused.reason, refused.reason
    assert isinstance(await decide(shape(pattern), {"x": value("aaaa")}), Allow)


@pytest.mark.usefixtures("no_separate_process")
@pytest.mark.parametrize(
    ("pattern", "value", "allowed"),
    [
        ("^\\d+$", "١٢٣", False),  # ECMA's \d is ASCII; Python's takes Arabic-Indic digits
        ("^abc$", "abc\n", False),  # ECMA's $ is the end; Python's also matches before a final \n
        ("^.$", "\u2028", False),  # . stops at every line terminator
        ("^.$", "é", True),
        ("^\\s$", "\u00a0", True),  # \s takes Unicode spaces and the BOM
        ("^\\s$", "\ufeff", True),
        ("^\\w+$", "é", False),  # \w is ASCII
        ("\\bfoo\\b", "a foo b", True),
        ("^\\p{Lu}", "Éa", True),  # property classes: Python's re has none
        ("^\\u{1F600}$", "😀", True),
        ("^\\uD83D\\uDE00$", "😀", True),  # a surrogate pair escape is one character
        ("^(?<year>\\d{4})$", "2024", True),  # a named group, as ECMA spells it
        ("^[^]$", "x", True),
        ("[]", "x", False),
        ("^a{$", "a{", True),  # a brace that starts no quantifier is a literal
        ("^[\\d-z]+$", "1-z", True),
        ("^\\cJ$", "\n", True),
    ],
)
async def test_patterns_mean_what_they_mean_in_ecma_262(pattern: str, value: str, allowed: bool) -> None:
    decision = await decide(in_string(pattern), {"x": value})
    assert isinstance(decision, Allow if allowed else Deny), decision


@pytest.mark.parametrize(
    ("pattern", "why"),
    [
        ("(?i)abc", "unknown group syntax"),
        ("\\q", "unknown escape"),
        ("a*+", "nothing to repeat"),
        ("[z-a]", "out of order"),
        ("(a", "missing ')'"),
        ("\\p{L}(?=a)", "\\p"),  # RE2 cannot run the look-ahead, Python's re cannot read \p
    ],
)
async def test_a_pattern_no_engine_takes_makes_the_schema_unusable_with_the_reason(
    pattern: str, why: str
) -> None:
    decision = await decide(in_string(pattern), {"x": "abc"})
    assert isinstance(decision, Deny)
    assert "not valid JSON Schema" in decision.reason and why in decision.reason, decision.reason


def test_searches_re2_cannot_do_here_must_leave_the_process() -> None:
    with regex_budget():
        assert search("^([a-z]+)+$", "abc")
        with pytest.raises(NeedsIsolation, match="look-ahead"):
            search("(?=a)a", "a")
        with pytest.raises(NeedsIsolation, match="back reference"):
            search("(a)\\1", "aa")
        with pytest.raises(NeedsIsolation, match="lone surrogate"):
            search("^.$", "\ud800")
    big = "".join(random.Random(7).choice("abcdefghijklmnopqrst") for _ in range(100_000))
    with regex_budget(), pytest.raises(NeedsIsolation, match="more work"):
        search("[a-q][^u-z]{500}x", big)
    with regex_budget(isolated=True):  # in the separate process, all of it runs
        assert search("(?=a)a", "a") and search("(a)\\1", "aa") and search("^.$", "\ud800")
        assert not search("[a-q][^u-z]{500}x", big)
    with pytest.raises(RuntimeError, match="outside regex_budget"):
        search("a", "a")


def test_the_compiled_validator_takes_no_pattern_that_backtracks() -> None:
    assert compiled_validator(in_string("(?=a)a")) is None
    assert compiled_validator(in_string("^(a+)\\1$")) is None
    linear = compiled_validator(in_string("^([a-z]+)+$"))
    assert linear is not None and not linear.is_valid({"x": HOSTILE})


# -- the separate process ------------------------------------------------------------------------


@pytest.mark.integration
@pytest.mark.parametrize(
    ("pattern", "good", "bad"),
    [
        ("^(a+)\\1$", "aaaa", "aaa"),
        ("^(?<half>b+)\\k<half>$", "bbbb", "bbb"),
        ("^(?=[a-z])\\w+$", "abc", "1bc"),
        ("^(?!x)\\w+$", "abc", "xbc"),
        ("(?<=a)b", "ab", "cb"),
        ("^a{1001,}$", "a" * 1001, "a" * 1000),  # a count beyond RE2's limit
    ],
)
async def test_patterns_re2_cannot_run_are_checked_in_a_separate_process(
    pattern: str, good: str, bad: str
) -> None:
    schema = in_string(pattern)
    assert SchemaCheck(schema).isolated is not None
    gate = ArgumentGate(policy())
    assert isinstance(await decide(schema, {"x": good}, gate), Allow)
    refused = await decide(schema, {"x": bad}, gate)
    assert isinstance(refused, Deny) and refused.reason.startswith("invalid argument at x:"), refused


@pytest.mark.integration
async def test_a_backtracking_pattern_is_killed_at_the_time_limit_and_the_call_refused() -> None:
    refused = await decide(in_string("^(?=[a-z])([a-z]+)+$"), {"x": "a" * 40 + "!"})
    assert isinstance(refused, Deny) and refused.reason == "validating the arguments took longer than 2 s"
    assert schema_workers() == [], "the process was killed and reaped"


@pytest.mark.integration
async def test_other_calls_are_decided_while_a_hostile_pattern_is_checked() -> None:
    """The same gate (one broker serves every principal): a trivial call is decided, and
    allowed, while the separate process still backtracks on the hostile one."""
    gate = ArgumentGate(policy())
    hostile: list[Any] = []
    async with anyio.create_task_group() as tasks:

        async def attack() -> None:
            hostile.append(await decide(in_string("^(?=[a-z])([a-z]+)+$"), {"x": "a" * 40 + "!"}, gate))

        tasks.start_soon(attack)
        for _ in range(3_000):  # until the hostile check runs in its process (30 s at most)
            if schema_workers():
                break
            await anyio.sleep(0.01)
        (worker,) = schema_workers()
        other = await decide(in_string("^CUST-[0-9]{4}$"), {"x": "CUST-0001"}, gate)
        assert isinstance(other, Allow)
        assert hostile == [] and worker.is_running(), "decided while the hostile check still runs"
    assert isinstance(hostile[0], Deny) and "took longer" in hostile[0].reason


@pytest.fixture
def separate_processes(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The instances checked in a separate process (the real one), in order."""
    return count_separate_processes(monkeypatch)


@pytest.mark.integration
async def test_more_work_than_this_process_does_inline_goes_to_the_separate_process(
    separate_processes: list[Any],
) -> None:
    schema = in_string("[a-q][^u-z]{300}x")
    assert SchemaCheck(schema).isolated is None, "RE2 runs the pattern: only the work is too much"
    assert isinstance(await decide(schema, {"x": "a" * 200_000 + "x"}), Allow)
    refused = await decide(schema, {"x": "a" * 200_000})
    assert isinstance(refused, Deny)
    assert refused.reason == (
        "invalid argument at x: 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa'… "
        "(200,000 characters) does not match '[a-q][^u-z]{300}x'"
    )
    assert len(separate_processes) == 2
    # A short text against the same pattern is little work: decided here.
    assert isinstance(await decide(schema, {"x": "b" * 301 + "x"}), Allow)
    assert len(separate_processes) == 2


@pytest.mark.integration
async def test_a_lone_surrogate_is_checked_in_the_separate_process() -> None:
    schema = in_string("^.$")
    assert isinstance(await decide(schema, {"x": "\ud800"}), Allow)
    refused = await decide(schema, {"x": "\ud800\ud800"})
    assert isinstance(refused, Deny) and "does not match" in refused.reason


@pytest.mark.integration
async def test_pattern_properties_beside_unevaluated_properties_go_to_the_separate_process() -> None:
    schema = {
        "type": "object",
        "patternProperties": {"^x": {"type": "integer"}},
        "unevaluatedProperties": False,
    }
    assert SchemaCheck(schema).isolated is not None
    gate = ArgumentGate(policy(strict_arguments=False))
    assert isinstance(await decide(schema, {"xa": 1}, gate), Allow)
    assert isinstance(await decide(schema, {"b": 1}, gate), Deny)


@pytest.mark.integration
@pytest.mark.parametrize(
    ("command", "reason"),
    [
        (["/nonexistent/python"], "the checking process could not start"),
        ([sys.executable, "-c", "print('ready', flush=True); import os; os._exit(3)"], "without an answer"),
        ([sys.executable, "-c", "print('ready'); input(); print('[1, 2]')"], "an answer that is not one"),
        ([sys.executable, "-c", "print('hello!')"], "did not start"),
    ],
    ids=["cannot-start", "dies", "garbled", "not-ready"],
)
async def test_a_separate_process_that_fails_refuses_the_call(
    monkeypatch: pytest.MonkeyPatch, command: list[str], reason: str
) -> None:
    monkeypatch.setattr(schema_isolation, "_command", lambda: command)
    refused = await decide(in_string("^(a+)\\1$"), {"x": "aaaa"})
    assert isinstance(refused, Deny) and refused.reason.startswith("the arguments could not be validated")
    assert reason in refused.reason, refused.reason
