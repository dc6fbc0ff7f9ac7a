"""``codemode run`` over a quota of ``[policy.quotas]``: refused before it starts, exit status 1,
saying which quota, its limit and when to retry (in words, and with ``--json`` as fields)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests._demo_workspace import make_workspace

CLI = [sys.executable, "-m", "codemode.cli"]
QUOTAS_TOML = """
[policy.quotas.default]
runs_per_hour = 1
"""


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    return make_workspace(tmp_path, QUOTAS_TOML, pool_size=0)


def run(workspace: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [*CLI, "run", "-", *args, "--config", str(workspace)]
    return subprocess.run(command, input="1 + 1", capture_output=True, text=True, timeout=180, check=False)


@pytest.mark.integration
def test_a_run_over_quota_is_refused_with_the_quota_and_when_to_retry(workspace: Path) -> None:
    assert run(workspace, "--json").returncode == 0
    refused = run(workspace)
    if refused.returncode == 0:  # the UTC hour turned between the two runs: this one is the new hour's
        refused = run(workspace)
    assert refused.returncode == 1, refused.stderr
    said = " ".join(refused.stderr.split())
    assert "refused:" in said and "runs_per_hour = 1" in said and "retry after" in said, said
    data = json.loads(run(workspace, "--json").stdout)
    assert (data["status"], data["error"], data["quota"], data["limit"]) == (
        "refused",
        "quota_exceeded",
        "runs_per_hour",
        1,
    )
    assert 0 < data["retry_after_s"] <= 3600 and data["retry_at"].endswith("Z")
