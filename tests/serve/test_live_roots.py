"""Roots edited in the config file while `codemode serve` runs reach the server with no restart.

A real ``codemode serve --transport http`` (a subprocess) runs the fixture server
``tests/fixtures/servers/rooted_server.py`` over stdio; the test edits the config file beside it.
On 2025-11-25 the server is sent ``notifications/roots/list_changed`` and lists the roots again
(its log shows what it got); 2026-07-28 has no client notifications, so there the server gets the
new roots the next time it asks. Any other change, and a file that does not load, leave the
running config as it was, and serve says so on stderr.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from tests.serve.conftest import make_workspace, serving_http
from tests.serve.test_serve import http, text_of

pytestmark = pytest.mark.integration

SERVER = Path(__file__).resolve().parents[1] / "fixtures" / "servers" / "rooted_server.py"
ROOTS = "from servers.rooted import roots\nroots()['result']\n"
DEADLINE_S = 60.0


def rooted_workspace(directory: Path, protocol: str) -> tuple[Path, Path]:
    """A demo workspace plus the rooted server (synced, approved); the config and the server's log."""
    log = directory / "rooted.jsonl"
    args = json.dumps([str(SERVER), "--log", str(log)])
    server = (
        f"\n[servers.rooted]\ncommand = {json.dumps(sys.executable)}\nargs = {args}\n"
        f'protocol = "{protocol}"\ntrusted = true\nroots = ["/srv/data"]\n'
    )
    return make_workspace(directory, server), log


def wait_for(predicate: Callable[[], bool]) -> None:
    """Poll ``predicate`` until it holds (a generous deadline, not a timing assumption)."""
    deadline = time.monotonic() + DEADLINE_S
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"still not so after {DEADLINE_S:g} s")
        time.sleep(0.05)


def list_roots(url: str) -> str:
    """The server's ``roots`` tool, called by a program through serve: what it got, as text."""

    async def call() -> str:
        async with Client(http(url, token=None), mode="legacy") as client:
            return text_of(await client.call_tool("run_code", {"code": ROOTS}))

    return anyio.run(call)


def logged(log: Path) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]


@pytest.mark.parametrize("protocol", ["legacy", "2026-07-28"])
def test_roots_edited_while_serving_reach_the_server_without_a_restart(tmp_path: Path, protocol: str) -> None:
    workspace, log = rooted_workspace(tmp_path, protocol)
    new = ["file:///srv/reports", "file:///srv/archive"]
    with serving_http(workspace, stderr_copy=tmp_path / "serve.err") as url:
        before = list_roots(url)
        log.unlink(missing_ok=True)  # what the server logged before the edit is not under test
        workspace.write_text(
            workspace.read_text().replace('roots = ["/srv/data"]', 'roots = ["/srv/reports", "/srv/archive"]')
        )
        if protocol == "legacy":
            wait_for(lambda: bool(logged(log)))
            assert logged(log) == [{"event": "roots_list_changed", "roots": new}]
            after = list_roots(url)
        else:  # no notification in this revision: the next call's input round gets the new roots
            wait_for(lambda: "file:///srv/reports" in list_roots(url))
            after = list_roots(url)
            assert logged(log) == []
    assert before.startswith("status: ok"), before
    assert "file:///srv/data" in before
    assert after.startswith("status: ok"), after
    assert all(root in after for root in new) and "file:///srv/data" not in after
    assert "only roots are applied" not in (tmp_path / "serve.err").read_text()


def test_an_edit_that_does_not_load_is_ignored_and_other_changes_wait_for_a_restart(
    tmp_path: Path,
) -> None:
    workspace, log = rooted_workspace(tmp_path, "legacy")
    errors = tmp_path / "serve.err"
    original = workspace.read_text()
    with serving_http(workspace, stderr_copy=errors) as url:
        log.unlink(missing_ok=True)
        # Not TOML at all, then TOML that does not validate (a relative root).
        workspace.write_text(original.replace('roots = ["/srv/data"]', 'roots = ["/srv/broken"'))
        wait_for(lambda: errors.read_text().count("does not load") == 1)
        workspace.write_text(original.replace('roots = ["/srv/data"]', 'roots = ["srv/relative"]'))
        wait_for(lambda: errors.read_text().count("does not load") == 2)
        ignored = list_roots(url)
        assert logged(log) == [], "the server was told nothing"

        # A valid edit: its roots apply at once, the rest (the sandbox's pool) waits for a restart.
        edited = original.replace('roots = ["/srv/data"]', 'roots = ["/srv/reports"]')
        workspace.write_text(edited.replace("pool_size = 1\n", "pool_size = 2\n"))
        wait_for(lambda: bool(logged(log)))
        wait_for(lambda: "only roots are applied without a restart" in errors.read_text())
        assert "(not applied: sandbox)" in errors.read_text()
        applied = list_roots(url)
    assert "not valid TOML" in errors.read_text()
    assert "srv/relative" in errors.read_text() and "not an absolute path" in errors.read_text()
    assert ignored.startswith("status: ok") and "file:///srv/data" in ignored, ignored
    assert logged(log) == [{"event": "roots_list_changed", "roots": ["file:///srv/reports"]}]
    assert applied.startswith("status: ok") and "file:///srv/reports" in applied, applied
    assert "Traceback" not in errors.read_text()
