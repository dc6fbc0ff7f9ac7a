"""The official MCP conformance suite, both sides, both requirement sets (see conformance/README.md).

Runs ``conformance/run.sh``: it installs the pinned ``@modelcontextprotocol/conformance`` and
Node.js 22 (npm packages) when needed, runs the server scenarios against
``codemode serve --transport http`` and the client scenarios against codemode's host, and fails on
any failure that ``conformance/baseline.json`` does not list (or on a baseline entry that passes
now). The pass counts per requirement set and side are printed to the terminal.

Without npm (or with the registry unreachable) the test is skipped - unless
``CODEMODE_REQUIRE_CONFORMANCE=1`` (CI sets it), which turns that into a failure.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
RUN = REPO / "conformance" / "run.sh"
PREREQUISITES_MISSING = 3
"""Exit status of run.sh / install.sh when npm or the Node.js 22 package cannot be had."""


def _missing(reason: str) -> None:
    if os.environ.get("CODEMODE_REQUIRE_CONFORMANCE") == "1":
        pytest.fail(f"conformance suite required (CODEMODE_REQUIRE_CONFORMANCE=1) but {reason}")
    pytest.skip(reason)


def run_suite(tmp_path: Path, capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    """``run.sh ARGS``: its summary, after the checks every run must pass."""
    if shutil.which("npm") is None and not (REPO / "conformance" / "node_modules").is_dir():
        _missing("npm is not installed, so the conformance suite cannot be installed")
    results = tmp_path / "results"
    env = {**os.environ, "CODEMODE_PYTHON": sys.executable}
    done = subprocess.run(
        ["bash", str(RUN), "--results", str(results), "--quiet", *args],
        capture_output=True,
        text=True,
        timeout=1200,
        env=env,
        cwd=REPO,
    )
    if done.returncode == PREREQUISITES_MISSING:
        _missing(f"the conformance suite could not be installed:\n{done.stderr[-2000:]}")
    with capsys.disabled():  # CI prints the pass counts per requirement set and side
        sys.stdout.write("\n" + done.stdout)
    summary_path = results / "summary.json"
    assert summary_path.exists(), f"run.sh wrote no summary (exit {done.returncode}):\n{done.stderr[-4000:]}"
    summary: dict[str, Any] = json.loads(summary_path.read_text())
    assert set(summary["results"]) == {"2025-11-25", "2026-07-28"}
    for req_set, sides in summary["results"].items():
        for side, counts in sides.items():
            assert counts["total"] > 0, f"{req_set} {side}: no applicable scenario ran"
    assert summary["ok"], (
        "conformance failures not in conformance/baseline.json:\n"
        + "\n".join(summary["unexpected"] + summary["stale"])
        + f"\n\nstderr:\n{done.stderr[-4000:]}"
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return summary


@pytest.mark.slow
@pytest.mark.timeout(900)  # about 60 s alone; the suite's 300 s default is for ordinary tests
def test_mcp_conformance_suite_passes_apart_from_the_baseline(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Both sides, both requirement sets; the client's auth/* scenarios run in their own test
    module (test_conformance_auth.py), so that they can run beside these."""
    summary = run_suite(tmp_path, capsys, "--client-scenarios", "other")
    for req_set, sides in summary["results"].items():
        assert set(sides) == {"server", "client"}, req_set
