"""The README's bearer-token snippets ("As an MCP server") work as pasted: the TOML in a config,
the shell line that makes a token, and the ``mcp`` client that sends it to a real
``codemode serve --transport http``. A README edit that breaks one fails here."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.serve.conftest import make_workspace, serving_http

pytestmark = pytest.mark.integration

README = Path(__file__).resolve().parents[2] / "README.md"
SNIPPET_URL = "http://127.0.0.1:8765/mcp"


def section(title: str) -> str:
    text = README.read_text(encoding="utf-8")
    start = text.index(f"\n### {title}\n")
    end = text.find("\n### ", start + 1)
    return text[start:end]


def fenced(text: str, language: str) -> str:
    [block] = re.findall(rf"```{language}\n(.*?)```", text, flags=re.S)
    return block


def test_the_token_snippets_work_as_pasted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = section("As an MCP server")
    assert "at least 16 characters" in text
    toml, shell, client = fenced(text, "toml"), fenced(text, "bash"), fenced(text, "python")
    assert "codemode serve --transport http" in shell and SNIPPET_URL in client

    # The shell's token line, run as written.
    [export] = [line for line in shell.splitlines() if line.startswith("export CODEMODE_ALICE_TOKEN=")]
    made = subprocess.run(
        ["bash", "-c", f'{export}\nprintf %s "$CODEMODE_ALICE_TOKEN"'],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert len(made) >= 16, made

    workspace = make_workspace(tmp_path, toml)
    monkeypatch.setenv("CODEMODE_ALICE_TOKEN", made)  # serve resolves ${CODEMODE_ALICE_TOKEN}
    with serving_http(workspace) as url:
        script = client.replace(SNIPPET_URL, url)  # the one change: the free port of this test
        done = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, timeout=180, check=False
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("status: ok") and "\n45\n" in done.stdout, done.stdout
        # The token is what let it in: another one is refused.
        wrong = {**os.environ, "CODEMODE_ALICE_TOKEN": "not-the-token-0123456789"}
        refused = subprocess.run(
            [sys.executable, "-c", script],
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
            env=wrong,
        )
        assert refused.returncode != 0 and "status: ok" not in refused.stdout, refused.stdout
