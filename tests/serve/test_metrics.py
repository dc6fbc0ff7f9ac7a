"""``codemode serve --transport http --metrics``: Prometheus text whose counters match the ledger."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from mcp import Client
from prometheus_client.parser import text_string_to_metric_families

from codemode.ledger import open_ledger

from .conftest import TOKENS, TOKENS_TOML, make_workspace, serving_http
from .test_serve import http

pytestmark = pytest.mark.anyio

PROGRAM = """
from servers.crm import get_customer, add_note
get_customer(customer_id="CUST-0001")
get_customer(customer_id="CUST-0002")
try:
    add_note(customer_id="CUST-0001", text="needs consent; this client cannot give it")
except Exception:
    pass
"done"
"""


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    found: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


@pytest.fixture
def fresh_workspace(tmp_path: Path) -> Path:
    """Its own ledger: the counters start at zero with the server, so they must match it."""
    return make_workspace(tmp_path, TOKENS_TOML)


@pytest.mark.integration
async def test_metrics_parse_as_prometheus_text_and_match_the_ledger(fresh_workspace: Path) -> None:
    workspace = fresh_workspace
    with serving_http(workspace, "--metrics") as url:
        async with Client(http(url)) as client:
            for _ in range(2):
                reply = await client.call_tool("run_code", {"code": PROGRAM})
                assert not reply.is_error, reply
        metrics_url = url.rsplit("/", 1)[0] + "/metrics"
        async with httpx.AsyncClient() as web:
            refused = await web.get(metrics_url)
            signed = {"Authorization": f"Bearer {TOKENS['alice']}"}
            port = metrics_url.split(":")[2].split("/")[0]
            # A DNS-rebinding page: its Host, or its Origin, names another site.
            rebound = await web.get(metrics_url, headers={**signed, "Host": f"evil.example:{port}"})
            foreign = await web.get(metrics_url, headers={**signed, "Origin": "http://evil.example"})
            answer = await web.get(metrics_url, headers=signed)
    assert refused.status_code == 401, "the metrics need a token like the MCP endpoint"
    assert (rebound.status_code, foreign.status_code) == (421, 403), "and its Host and Origin checks"
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/plain")
    found = samples(answer.text)
    ledger = open_ledger(workspace.with_name("codemode.db"), create=False)
    try:
        states = [str(c.state) for c in ledger.list_calls(limit=1000)]
        runs = ledger.list_runs(limit=100)
    finally:
        ledger.close()
    allowed = (("decision", "allowed"), ("gate", ""), ("outcome", "ok"))
    denied = (("decision", "denied"), ("gate", "consent"), ("outcome", "denied"))
    assert found[("codemode_tool_calls_total", allowed)] == states.count("succeeded") == 4
    assert found[("codemode_tool_calls_total", denied)] == states.count("denied") == 2
    assert found[("codemode_denials_total", (("gate", "consent"),))] == 2
    assert found[("codemode_runs_total", (("status", "ok"),))] == len(runs) == 2
    assert found[("codemode_broker_seconds_count", ())] == 6
    assert found[("codemode_mcp_call_seconds_count", (("server", "crm"),))] == 4
    assert found[("codemode_result_bytes_total", ())] > 0
    assert found[("codemode_sandbox_start_seconds_count", (("backend", "process"),))] >= 1
    # Each run's cost, observed once per run: the same numbers the ledger's run records keep.
    process = (("backend", "process"),)
    assert found[("codemode_run_sandbox_cpu_seconds_count", process)] == 2
    assert found[("codemode_run_sandbox_cpu_seconds_sum", process)] == pytest.approx(
        sum(run.summary["usage"]["cpu_s"] for run in runs if run.summary is not None), abs=1e-3
    )
    assert found[("codemode_run_sandbox_peak_mb_count", process)] == 2
    for direction in ("in", "out"):
        assert found[("codemode_run_channel_bytes_count", (("direction", direction),))] == 2
        assert found[("codemode_run_channel_bytes_sum", (("direction", direction),))] == sum(
            run.summary["usage"][f"channel_{direction}_bytes"] for run in runs if run.summary is not None
        )
    assert found[("codemode_run_broker_cpu_seconds_count", ())] == 2
    assert found[("codemode_warm_pool_ready", ())] in (0, 1), "the workspace's pool holds one"


def test_metrics_need_the_http_transport() -> None:
    from click.testing import CliRunner

    from codemode.cli._main import cli

    result = CliRunner().invoke(cli, ["serve", "--metrics"])
    assert result.exit_code == 2
    assert "--metrics needs --transport http" in result.output
