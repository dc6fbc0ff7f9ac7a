"""Roots changed while the host runs: offered from then on, and announced where the protocol can.

The server is a real stdio process (``tests/fixtures/servers/rooted_server.py``). On 2025-11-25
it is sent ``notifications/roots/list_changed`` and lists the roots again at once, as a real
server would; 2026-07-28 has no client notifications at all (the SDK refuses them), so there the
server gets the new roots the next time it asks. What the server received is read from its log.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import mcp_types
import psutil
import pytest

from codemode.config import config_from_mapping
from codemode.errors import CatalogError, OutcomeUnknownError, ServerUnavailableError
from codemode.host import ConnectionState, McpHost
from codemode.host._inputs import NO_ROOTS, InputRouter

pytestmark = pytest.mark.anyio

SERVER = Path(__file__).resolve().parents[1] / "fixtures" / "servers" / "rooted_server.py"
ERAS = ["legacy", "2026-07-28"]


def rooted(log: Path, protocol: str, roots: list[str]) -> McpHost:
    server = {"command": sys.executable, "args": [str(SERVER), "--log", str(log)], "protocol": protocol}
    return McpHost(config_from_mapping({"servers": {"rooted": {**server, "roots": roots}}}))


def logged(log: Path) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]


async def wait_until(predicate: Callable[[], bool], timeout: float = 30.0) -> None:
    with anyio.fail_after(timeout):
        while not predicate():
            await anyio.sleep(0.02)


async def listed_roots(host: McpHost) -> Any:
    """What the server's ``roots`` tool got when it asked for the roots just now."""
    result = await host.call_tool("rooted", "roots", {})
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return result.structured_content["result"]


async def declared(host: McpHost) -> Any:
    result = await host.call_tool("rooted", "roots_capability", {})
    assert result.structured_content is not None
    return result.structured_content["result"]


@pytest.mark.integration
async def test_a_2025_server_is_sent_list_changed_and_lists_the_new_roots(tmp_path: Path) -> None:
    log = tmp_path / "rooted.jsonl"
    async with rooted(log, "legacy", ["/srv/data"]) as host:
        assert await declared(host) == {"listChanged": True}
        assert await listed_roots(host) == ["file:///srv/data"]

        assert await host.update_roots("rooted", ["/srv/reports", "/home/ann/my files"]) == "notified"
        await wait_until(lambda: len(logged(log)) == 1)
        new = ["file:///srv/reports", "file:///home/ann/my%20files"]
        assert logged(log) == [{"event": "roots_list_changed", "roots": new}]
        assert await listed_roots(host) == new

        assert await host.update_roots("rooted", ["/srv/reports", "/home/ann/my files"]) == "unchanged"
        # Removing them all: the capability stays declared, the server is told, the list is empty.
        assert await host.update_roots("rooted", []) == "notified"
        await wait_until(lambda: len(logged(log)) == 2)
        assert logged(log)[1] == {"event": "roots_list_changed", "roots": []}, "one notice per change"
        assert await listed_roots(host) == []


@pytest.mark.integration
async def test_a_2026_server_gets_the_new_roots_when_it_next_asks(tmp_path: Path) -> None:
    log = tmp_path / "rooted.jsonl"
    async with rooted(log, "2026-07-28", ["/srv/data"]) as host:
        assert host.connection("rooted").protocol_version == "2026-07-28"
        assert await listed_roots(host) == ["file:///srv/data"]
        assert await host.update_roots("rooted", ["/srv/reports"]) == "updated"
        assert await listed_roots(host) == ["file:///srv/reports"]
        assert await host.update_roots("rooted", []) == "updated"
        assert await listed_roots(host) == []
    assert logged(log) == [], "2026-07-28 has no roots/list_changed notification"


@pytest.mark.integration
@pytest.mark.parametrize("protocol", ERAS)
async def test_roots_added_to_a_connection_made_without_them_apply_from_the_next_connection(
    tmp_path: Path, protocol: str
) -> None:
    log = tmp_path / "rooted.jsonl"
    async with rooted(log, protocol, []) as host:
        connection = host.connection("rooted")
        assert await declared(host) is None, "no roots configured: no capability declared"
        assert await host.update_roots("rooted", ["/srv/data"]) == "reconnect needed"
        assert connection.inputs.roots == ["/srv/data"]

        server = next(
            p
            for p in psutil.Process().children(recursive=True)
            if str(SERVER) in p.cmdline() and "_launcher.py" not in " ".join(p.cmdline())
        )
        server.kill()
        with pytest.raises((OutcomeUnknownError, ServerUnavailableError)):
            await host.call_tool("rooted", "roots", {})
        await wait_until(lambda: connection.reconnects == 1 and connection.state is ConnectionState.READY)

        assert await declared(host) == {"listChanged": True}
        assert await listed_roots(host) == ["file:///srv/data"]
    assert logged(log) == []


@pytest.mark.integration
async def test_roots_of_an_unknown_server_or_relative_roots_are_refused(tmp_path: Path) -> None:
    async with rooted(tmp_path / "rooted.jsonl", "legacy", ["/srv/data"]) as host:
        with pytest.raises(CatalogError):
            await host.update_roots("nobody", ["/srv"])
        with pytest.raises(ValueError, match="not an absolute path"):
            await host.update_roots("rooted", ["/srv/ok", "relative/dir"])
        assert host.connection("rooted").inputs.roots == ["/srv/data"], "nothing changed"
        assert await listed_roots(host) == ["file:///srv/data"]


# -- the router alone ---------------------------------------------------------------------------


def router(roots: list[str]) -> InputRouter:
    config = config_from_mapping({"servers": {"s": {"command": "x", "roots": roots}}}, base_dir=Path("/tmp"))
    return InputRouter(config.servers["s"])


async def test_without_a_connection_new_roots_are_kept_for_the_next_one() -> None:
    routes = router([])
    assert "list_roots_callback" not in routes.client_callbacks()
    assert await routes.update_roots(["/srv/data"]) == "updated"
    callbacks = routes.client_callbacks()
    listed = await callbacks["list_roots_callback"](None)
    assert [str(root.uri) for root in listed.roots] == ["file:///srv/data"]


async def test_emptied_roots_list_empty_where_declared_and_are_refused_where_not() -> None:
    routes = router(["/srv/data"])
    routes.client_callbacks()  # a connection made with the roots capability
    assert await routes.update_roots([]) == "updated"
    answer = await routes.answer(None, mcp_types.ListRootsRequest())
    assert isinstance(answer, mcp_types.ListRootsResult) and answer.roots == []

    never = router([])
    never.client_callbacks()
    refused = await never.answer(None, mcp_types.ListRootsRequest())
    assert isinstance(refused, mcp_types.ErrorData) and refused.message == NO_ROOTS
