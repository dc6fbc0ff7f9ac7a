"""``run_code`` under ``codemode serve`` takes a plan too: ``plan=true`` answers with the plan of
the program's writes (nothing but reads sent), a person approves it on the host, and
``with_plan`` runs the same program for real without asking; ``verify`` checks its result."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from tests.serve.conftest import TOKENS, TOKENS_TOML, make_workspace, serving_http

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

WRITE = 'from servers.crm import add_note\nadd_note(customer_id="CUST-0001", text="planned under serve")\n'


def http(url: str, who: str) -> Any:
    headers = {"Authorization": f"Bearer {TOKENS[who]}"}
    return streamable_http_client(url, http_client=create_mcp_http_client(headers=headers))


@pytest.fixture(scope="module")
def config_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_workspace(tmp_path_factory.mktemp("serve-plans"), TOKENS_TOML)


@pytest.fixture(scope="module")
def url(config_path: Path) -> Iterator[str]:
    with serving_http(config_path) as served:
        yield served


def approve(config_path: Path, plan_id: str) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "codemode.cli",
            "approve",
            "--plan",
            plan_id,
            "--yes",
            "--config",
            str(config_path),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


async def test_a_plan_made_under_serve_and_approved_on_the_host_runs_without_asking(
    url: str, config_path: Path
) -> None:
    async with Client(http(url, "alice")) as alice:
        unplanned = await alice.call_tool("run_code", {"code": WRITE})
        assert unplanned.structured_content is not None
        assert unplanned.structured_content["denials"] == 1, "no one to ask: the write is denied"

        planned = await alice.call_tool("run_code", {"code": WRITE, "plan": True})
        assert not planned.is_error, planned.content
        assert planned.structured_content is not None
        plan = planned.structured_content["plan"]
        assert [call["tool"] for call in plan["calls"]] == ["add_note"]
        text = planned.content[0]
        assert getattr(text, "text", "").startswith(f"plan {plan['plan_id']}: 1 planned calls")

        approve(config_path, plan["plan_id"])
        real = await alice.call_tool("run_code", {"code": WRITE, "with_plan": plan["plan_id"]})
        assert not real.is_error, real.content
        assert real.structured_content is not None
        assert (real.structured_content["calls"], real.structured_content["denials"]) == (1, 0)

        other = await alice.call_tool(
            "run_code", {"code": WRITE + "# edited\n", "with_plan": plan["plan_id"]}
        )
        assert other.is_error, "a plan is bound to its code"


async def test_a_failing_verify_marks_the_run_unverified_and_a_dry_run_takes_no_verify(url: str) -> None:
    async with Client(http(url, "alice")) as alice:
        checked = await alice.call_tool("run_code", {"code": "41", "verify": "RESULT == 42"})
        assert checked.structured_content is not None
        assert checked.structured_content["outcome"] == "unverified"
        refused = await alice.call_tool("run_code", {"code": "41", "plan": True, "verify": "RESULT == 42"})
        assert refused.is_error
