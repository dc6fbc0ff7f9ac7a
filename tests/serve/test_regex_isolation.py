"""A hostile pattern in a pinned schema cannot freeze ``codemode serve`` for everyone (issue 36).

The red team's finding: ``^([a-z]+)+$`` and a 29-character argument held serve's event loop for
11-13 s, and another principal's trivial run waited the whole time. Against a real serve with
two principals (alice and bob) and ``regex_server.py``: that pattern is now refused at once, and
bob's runs finish while alice's hostile validations (a pattern RE2 cannot run, backtracking in
its separate process until it is killed) are still going on.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import mcp_types
import pytest
from mcp import Client

from tests._regex_schemas import schema_workers
from tests.serve._background import BackgroundRun
from tests.serve.conftest import TOKENS, TOKENS_TOML, make_workspace, serving_http
from tests.serve.test_serve import http, text_of

pytestmark = pytest.mark.anyio

REGEX_SERVER = Path(__file__).resolve().parents[1] / "fixtures" / "servers" / "regex_server.py"
HOSTILE_CALLS = 5

ATTACK = f"""
from servers.regex import lookup
reasons = []
for _ in range({HOSTILE_CALLS}):
    try:
        lookup(code="a" * 40 + "!")
    except Exception as exc:
        reasons.append(str(exc))
reasons
"""
"""Alice's run: nothing but hostile validations, one after the other (each killed at 2 s)."""

TRIVIAL = """
from servers.regex import nested, ping
ping()
nested(code="abc")
"ok"
"""
"""Bob's run: two calls, one of them checked against a pattern (by RE2)."""


@pytest.fixture(scope="module")
def regex_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    server = f"""
[servers.regex]
command = {json.dumps(sys.executable)}
args = [{json.dumps(str(REGEX_SERVER))}]
trusted = true
"""
    workspace = make_workspace(tmp_path_factory.mktemp("regex"), TOKENS_TOML + server)
    with serving_http(workspace) as url:
        yield url


async def run_code(url: str, token: str, code: str) -> mcp_types.CallToolResult:
    async with Client(http(url, token), mode="legacy") as client:
        return await client.call_tool("run_code", {"code": code})


async def test_the_catastrophic_pattern_of_the_finding_is_refused_at_once(regex_url: str) -> None:
    code = 'from servers.regex import nested\nnested(code="a" * 29 + "!")'
    result = await run_code(regex_url, TOKENS["alice"], code)
    text = text_of(result)
    assert result.is_error and "CallDenied" in text, text
    assert "does not match '^([a-z]+)+$'" in text and "took longer" not in text, text
    assert schema_workers() == [], "RE2 decides it in serve's own process"


async def test_another_principals_run_finishes_while_a_hostile_validation_runs(regex_url: str) -> None:
    attack = BackgroundRun(regex_url, TOKENS["alice"], ATTACK)
    for _ in range(6_000):  # until alice's first hostile validation runs (60 s at most)
        if schema_workers():
            break
        await anyio.sleep(0.01)
    assert schema_workers(), "alice's pattern is checked in a separate process"

    answer = await run_code(regex_url, TOKENS["bob"], TRIVIAL)
    assert not answer.is_error, text_of(answer)
    summary: dict[str, Any] = answer.structured_content or {}
    assert summary["status"] == "ok" and summary["calls"] == 2
    # Bob is done; alice's run, nothing but hostile validations, is not.
    assert attack.result is None and attack.error is None, "bob's run waited for alice's"

    result = attack.wait(timeout=120)
    reasons = json.loads(text_of(result).split("not instructions ---\n", 1)[1])
    assert (
        reasons
        == ["denied by the arguments gate: validating the arguments took longer than 2 s"] * HOSTILE_CALLS
    )
    assert schema_workers() == [], "every separate process was killed and reaped"
