"""``codemode serve --transport http`` over a quota of ``[policy.quotas]``: ``run_code`` answers a
tool error whose ``structuredContent`` names the quota, its limit and when to retry
(``retry_after_s``); the ledger records the refused run, and ``/metrics`` counts it.

Not an HTTP 429: the answer to a ``tools/call`` inside an MCP session is read by the client only
from a 200 response, so the retry time travels in the tool error (see ``codemode.serve._quota``).
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from mcp import Client
from prometheus_client.parser import text_string_to_metric_families

from codemode.ledger import open_ledger

from .conftest import TOKENS, TOKENS_TOML, make_workspace, serving_http
from .test_serve import http, text_of

pytestmark = pytest.mark.anyio

QUOTAS_TOML = """
[policy.quotas.principals.alice]
runs_per_day = 1
"""


@pytest.fixture
def quota_workspace(tmp_path: Path) -> Path:
    """Its own ledger and metrics: alice may start one run a day."""
    return make_workspace(tmp_path, TOKENS_TOML + QUOTAS_TOML)


@pytest.mark.integration
async def test_a_run_over_quota_gets_a_structured_error_with_retry_after_and_is_recorded(
    quota_workspace: Path,
) -> None:
    workspace = quota_workspace
    with serving_http(workspace, "--metrics") as url:
        async with Client(http(url)) as client:  # 2026-07-28: the run is a background task
            assert client.protocol_version == "2026-07-28"
            first = await client.call_tool("run_code", {"code": "1 + 1"})
            second = await client.call_tool("run_code", {"code": "1 + 1"})
        async with Client(http(url), mode="legacy") as client:  # 2025-11-25: run in the request
            legacy = await client.call_tool("run_code", {"code": "1 + 1"})
            planned = await client.call_tool("run_code", {"code": "1 + 1", "plan": True})  # a dry run
        async with Client(http(url, TOKENS["bob"])) as client:
            bobs = await client.call_tool("run_code", {"code": "2 + 2"})
        async with httpx.AsyncClient() as web:
            signed = {"Authorization": f"Bearer {TOKENS['alice']}"}
            metrics = await web.get(url.rsplit("/", 1)[0] + "/metrics", headers=signed)
    assert not first.is_error, first
    assert second.is_error
    refusal = second.structured_content
    assert refusal is not None, second
    assert refusal["error"] == "quota_exceeded" and refusal["status"] == "refused"
    assert (refusal["quota"], refusal["limit"], refusal["used"]) == ("runs_per_day", 1, 1)
    assert (refusal["holder"], refusal["name"]) == ("principal", "alice")
    assert 0 < refusal["retry_after_s"] <= 86_400 and refusal["retry_at"].endswith("Z")
    assert "runs_per_day = 1" in text_of(second) and "retry after" in text_of(second)
    assert legacy.is_error and legacy.structured_content is not None
    assert {k: v for k, v in legacy.structured_content.items() if k != "retry_after_s"} == {
        k: v for k, v in refusal.items() if k != "retry_after_s"
    }, "both eras answer the same refusal"
    assert planned.is_error and planned.structured_content is not None
    assert planned.structured_content["error"] == "quota_exceeded", "a dry run is refused alike"
    assert not bobs.is_error, "another principal of the tenant has its own count"
    counted = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(metrics.text)
        for sample in family.samples
    }
    key = ("codemode_quota_refusals_total", (("quota", "runs_per_day"), ("what", "run")))
    assert counted[key] == 3
    ledger = open_ledger(workspace.with_name("codemode.db"), create=False)
    try:
        runs = ledger.list_runs(principal="alice")
    finally:
        ledger.close()
    assert sorted(run.status for run in runs) == ["ok", "refused", "refused", "refused"]
    refused = next(run for run in runs if run.status == "refused")
    assert refused.summary is not None and refused.summary["refused"]["quota"] == "runs_per_day"
