"""The first hour on real servers, as a newcomer goes through it (issue 39), with two third-party
servers from PyPI: mcp-server-time and mcp-server-git.

A Claude-Desktop-style ``mcpServers`` file is imported, the servers are synced, their tools are
reviewed with ``codemode pin --approve --accept-hints``, and a program that reads both servers
runs with ``--no-input``: without ``trusted = true`` anywhere. Without the acceptance, the same
program is refused, and the refusal names the ways out; its ``codemode approve`` line works as
pasted into a shell.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CLI = [sys.executable, "-m", "codemode.cli"]

PROGRAM = """
from servers.time import get_current_time
from servers.git import git_log, git_status

now = get_current_time(timezone="UTC")
print("timezone:", now["timezone"])
print("status:", git_status(repo_path=REPO))
print("log:", git_log(repo_path=REPO, max_count=1))
"""


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """A codemode command as a newcomer types it, in the workspace (``codemode.toml`` found there)."""
    return subprocess.run([*CLI, *args], cwd=cwd, capture_output=True, text=True, timeout=300, check=False)


def git_repository(path: Path) -> Path:
    """A repository with one commit, for mcp-server-git to read."""
    identity = {
        "GIT_AUTHOR_NAME": "Newcomer",
        "GIT_AUTHOR_EMAIL": "newcomer@example.com",
        "GIT_COMMITTER_NAME": "Newcomer",
        "GIT_COMMITTER_EMAIL": "newcomer@example.com",
    }
    env = {**os.environ, **identity}
    path.mkdir()
    (path / "README.md").write_text("The newcomer's repository.\n", encoding="utf-8")
    for command in (["init", "-q"], ["add", "README.md"], ["commit", "-q", "-m", "First commit"]):
        subprocess.run(["git", *command], cwd=path, env=env, check=True, capture_output=True, timeout=60)
    return path


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """``codemode init --from`` a Claude Desktop file naming the two servers, then ``sync``."""
    repo = git_repository(tmp_path / "repo")
    desktop = tmp_path / "claude_desktop_config.json"
    desktop.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "time": {"command": sys.executable, "args": ["-m", "mcp_server_time"]},
                    "git": {
                        "command": sys.executable,
                        "args": ["-m", "mcp_server_git", "--repository", str(repo)],
                    },
                }
            }
        ),
        encoding="utf-8",
    )
    work = tmp_path / "work"
    work.mkdir()
    for step in (["init", "--from", str(desktop)], ["sync"]):
        done = run(*step, cwd=work)
        assert done.returncode == 0, f"{step}: {done.stdout}\n{done.stderr}"
    (work / "prog.py").write_text(f"REPO = {str(repo)!r}\n{PROGRAM}", encoding="utf-8")
    return work


def run_program(work: Path) -> subprocess.CompletedProcess[str]:
    return run("run", "prog.py", "--no-input", "--backend", "process", cwd=work)


def assert_untrusted(work: Path) -> None:
    config = (work / "codemode.toml").read_text(encoding="utf-8")
    assert not re.search(r"^\s*trusted\s*=\s*true", config, re.MULTILINE), config


def test_reviewing_the_tools_settles_their_risk_and_the_program_reads_both_servers(workspace: Path) -> None:
    review = run("pin", "--approve", "--accept-hints", cwd=workspace)
    assert review.returncode == 0, review.stderr
    assert "accepted the hints of time/get_current_time: low risk" in review.stdout
    assert "accepted the hints of git/git_log: low risk" in review.stdout

    done = run_program(workspace)
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    assert "timezone: UTC" in done.stdout
    assert "First commit" in done.stdout and "Newcomer" in done.stdout
    assert "ok · run" in done.stderr and "3 calls · 0 denied" in done.stderr
    assert_untrusted(workspace)


def test_without_accepting_the_hints_the_refusal_names_the_ways_out_and_its_approve_line_works(
    workspace: Path,
) -> None:
    approved = run("pin", "--approve", cwd=workspace)
    assert approved.returncode == 0, approved.stderr
    assert "claim hints that would lower their risk" in approved.stdout

    refused = run_program(workspace)
    assert refused.returncode == 1
    message = refused.stderr
    assert "needs approval: time/get_current_time is high risk (not known to be read-only)" in message
    for way in (
        "codemode pin --accept-hints time/get_current_time",
        "trusted = true under [servers.time]",
        '[policy.consent] read_only = ["time/get_current_time"]',
        """codemode approve time/get_current_time --args '{"timezone": "UTC"}'""",
    ):
        assert way in message, message

    # The line works as pasted into a shell: with it, the one refused call goes through once.
    line = next(text for text in message.splitlines() if "codemode approve time/get_current_time" in text)
    pasted = line.split("then run again: ", 1)[1]
    assert pasted.startswith("codemode ")
    shell = f"{shlex.join(CLI)} {pasted.removeprefix('codemode ')}"
    issued = subprocess.run(
        ["sh", "-c", shell], cwd=workspace, capture_output=True, text=True, timeout=120, check=False
    )
    assert issued.returncode == 0, issued.stderr
    assert "approved one call of time/get_current_time" in issued.stdout
    next_refusal = run_program(workspace).stderr
    assert "needs approval: git/git_status is high risk" in next_refusal, "the time call went through"
    assert "codemode pin --accept-hints git/git_status" in next_refusal
    assert_untrusted(workspace)
