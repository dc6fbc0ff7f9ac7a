"""The MCP host against real servers over real transports."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest

from codemode.broker import ToolBackend
from codemode.calls import SendOptions
from codemode.config import config_from_mapping
from codemode.errors import CatalogError, OutcomeUnknownError, ServerUnavailableError
from codemode.host import ConnectionState, McpHost

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

EXAMPLES = ("docs", "crm", "tickets")


def host_for(servers: dict[str, dict[str, Any]]) -> McpHost:
    return McpHost(config_from_mapping({"servers": servers}))


def parent_cmdline(process: psutil.Process) -> str:
    """The command line of `process`'s parent, or "" when psutil finds none (e.g. it has exited)."""
    parent = process.parent()
    return "" if parent is None else " ".join(parent.cmdline())


async def wait_until(predicate: Callable[[], bool], timeout: float = 15.0) -> None:
    with anyio.fail_after(timeout):
        while not predicate():
            await anyio.sleep(0.02)


async def test_the_three_example_servers_connect_over_stdio(
    example_stdio: Callable[..., dict[str, Any]],
) -> None:
    async with host_for({name: example_stdio(name) for name in EXAMPLES}) as host:
        statuses = {s.name: s for s in host.statuses()}
        for name in EXAMPLES:
            status = statuses[name]
            assert status.state is ConnectionState.READY, status.error
            assert status.transport == "stdio"
            assert status.tool_count >= 4
            assert status.protocol_version == "2026-07-28"
            assert status.sdk_version
        result = await host.call_tool("crm", "get_customer", {"customer_id": "CUST-0001"})
        assert not result.is_error
        assert result.structured_content is not None


async def test_the_host_is_the_brokers_tool_backend_as_it_stands(
    example_stdio: Callable[..., dict[str, Any]],
) -> None:
    """The broker is handed the host itself (no adapter): a server it does not know runs no task
    and its call is refused by name, with nothing sent; a known one answers."""
    async with host_for({"crm": example_stdio("crm")}) as host:
        backend: ToolBackend = host
        assert backend.long_running("nope", "get_customer") is False
        assert backend.long_running("crm", "get_customer") is False
        with pytest.raises(CatalogError, match="no server named 'nope'"):
            await backend.call_tool("nope", "get_customer", {"customer_id": "CUST-0001"}, SendOptions())
        options = SendOptions(meta={"io.codemode/trace": "t-1"}, time_limit_s=5.0)
        result = await backend.call_tool("crm", "get_customer", {"customer_id": "CUST-0001"}, options)
        assert not result.is_error
        assert result.structured_content is not None


async def test_the_three_example_servers_connect_over_streamable_http(http_servers: Any) -> None:
    urls = {name: http_servers.start(name) for name in EXAMPLES}
    assert all(url.startswith("http://127.0.0.1:") for url in urls.values())
    async with host_for({name: {"url": url, "allow_loopback": True} for name, url in urls.items()}) as host:
        for status in host.statuses():
            assert status.state is ConnectionState.READY, status.error
            assert status.transport == "http"
            assert status.tool_count >= 4
        result = await host.call_tool("tickets", "get_ticket", {"ticket_id": "TCK-1001"})
        assert not result.is_error


async def test_both_protocol_eras_are_negotiated_and_recorded(
    example_stdio: Callable[..., dict[str, Any]], http_servers: Any
) -> None:
    stateless_url = http_servers.start("tickets", "--stateless")
    servers = {
        "handshake": example_stdio("docs", protocol="legacy"),
        "modern": example_stdio("docs", protocol="2026-07-28"),
        "stateless_http": {"url": stateless_url, "protocol": "2026-07-28", "allow_loopback": True},
        "http_handshake": {"url": stateless_url, "protocol": "legacy", "allow_loopback": True},
    }
    async with host_for(servers) as host:
        statuses = {s.name: s for s in host.statuses()}
        assert statuses["handshake"].protocol_version == "2025-11-25"
        assert statuses["handshake"].era == "handshake"
        assert statuses["modern"].protocol_version == "2026-07-28"
        assert statuses["modern"].era == "stateless"
        assert statuses["stateless_http"].protocol_version == "2026-07-28"
        assert statuses["http_handshake"].era == "handshake"
        for status in statuses.values():
            assert status.state is ConnectionState.READY, status.error
            assert status.capabilities is not None and "tools" in status.capabilities
            assert status.server_info is not None


async def test_identity_comes_from_the_config_name_not_from_server_info(
    example_stdio: Callable[..., dict[str, Any]],
) -> None:
    async with host_for({"my_crm": example_stdio("crm")}) as host:
        [status] = host.statuses()
        assert status.name == "my_crm"
        assert status.server_info is not None and status.server_info["name"] != "my_crm"
        catalog = host.catalog("my_crm")
        assert catalog is not None and all(t.server == "my_crm" for t in catalog.tools)


async def test_third_party_servers_from_pypi_connect(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    servers = {
        "time": {"command": sys.executable, "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"]},
        "git": {"command": sys.executable, "args": ["-m", "mcp_server_git", "--repository", str(repo)]},
    }
    async with host_for(servers) as host:
        statuses = {s.name: s for s in host.statuses()}
        assert statuses["time"].state is ConnectionState.READY, statuses["time"].error
        assert statuses["git"].state is ConnectionState.READY, statuses["git"].error
        time_tools = {t.name for t in host.catalog("time").tools}  # type: ignore[union-attr]
        assert "get_current_time" in time_tools
        result = await host.call_tool("time", "get_current_time", {"timezone": "UTC"})
        assert not result.is_error


async def test_broken_servers_fail_alone_with_clear_reasons(
    example_stdio: Callable[..., dict[str, Any]], fixture_stdio: Callable[..., dict[str, Any]]
) -> None:
    servers = {
        "good": example_stdio("crm"),
        "missing": {"command": "codemode-no-such-command-xyz"},
        "crashes": fixture_stdio("raw_server", "crash_after_initialize", protocol="legacy"),
        "silent": fixture_stdio("raw_server", "never_answer", connect_timeout=1.5),
        "unset_secret": {"command": "x", "env": {"KEY": "${CODEMODE_TEST_UNSET_VARIABLE}"}},
        "refused": {"url": "http://127.0.0.1:9/mcp", "connect_timeout": 5, "allow_loopback": True},
    }
    os.environ.pop("CODEMODE_TEST_UNSET_VARIABLE", None)
    async with host_for(servers) as host:
        statuses = {s.name: s for s in host.statuses()}
        assert statuses["good"].state is ConnectionState.READY
        assert "was not found" in (statuses["missing"].error or "")
        assert "codemode-no-such-command-xyz" in statuses["missing"].target
        assert statuses["crashes"].state is ConnectionState.FAILED
        assert "crashing on purpose" in statuses["crashes"].stderr_tail
        assert "connect_timeout = 1.5 s" in (statuses["silent"].error or "")
        assert "${CODEMODE_TEST_UNSET_VARIABLE}" in (statuses["unset_secret"].error or "")
        assert "127.0.0.1:9" in (statuses["refused"].error or "")
        for name in ("missing", "crashes", "silent", "unset_secret", "refused"):
            assert statuses[name].state is ConnectionState.FAILED
        # The good server still works after all of that.
        result = await host.call_tool("good", "get_customer", {"customer_id": "CUST-0002"})
        assert not result.is_error
        with pytest.raises(ServerUnavailableError) as info:
            await host.call_tool("crashes", "ping", {})
        assert "crashes" in str(info.value)


async def test_invalid_tool_names_and_huge_descriptions_are_excluded_and_the_rest_kept(
    fixture_stdio: Callable[..., dict[str, Any]],
) -> None:
    async with host_for({"bad": fixture_stdio("raw_server", "bad_tools")}) as host:
        catalog = host.catalog("bad")
        assert catalog is not None
        assert [t.name for t in catalog.tools] == ["good_one", "good_two"]
        reasons = {e.name: e.reason for e in catalog.excluded}
        assert "naming rules" in reasons["'has space'"]
        assert "10,000,000 characters" in reasons["huge"]
        assert len(reasons) == 3
        assert host.statuses()[0].excluded_count == 3


async def test_pagination_is_followed_and_an_endless_paginator_is_cut_off(
    fixture_stdio: Callable[..., dict[str, Any]],
) -> None:
    servers = {
        "paged": fixture_stdio("raw_server", "paginated"),
        "endless": fixture_stdio("raw_server", "endless_pages"),
    }
    async with host_for(servers) as host:
        assert [t.name for t in host.catalog("paged").tools] == ["tool_0", "tool_1", "tool_2"]  # type: ignore[union-attr]
        assert len(host.catalog("endless").tools) == 100  # type: ignore[union-attr]


async def test_shutdown_leaves_no_server_process_or_grandchild_behind(
    example_stdio: Callable[..., dict[str, Any]], fixture_stdio: Callable[..., dict[str, Any]]
) -> None:
    marker = f"codemode-orphan-{uuid.uuid4().hex}"
    os.environ["CHILD_MARKER"] = marker
    servers = {
        "spawner": fixture_stdio("raw_server", "spawn_child", env={"CHILD_MARKER": marker}),
        "crm": example_stdio("crm"),
    }
    me = psutil.Process()
    before = {p.pid for p in me.children(recursive=True)}  # other tests' session-scoped servers
    async with host_for(servers) as host:
        assert all(s.state is ConnectionState.READY for s in host.statuses())
        children = [p for p in me.children(recursive=True) if p.pid not in before]
        assert any(marker in " ".join(c.cmdline()) for c in children if c.is_running())
    _, alive = psutil.wait_procs(children, timeout=10)
    assert alive == [], f"still running after shutdown: {[p.cmdline() for p in alive]}"


@pytest.mark.parametrize("protocol", ["legacy", "2026-07-28"])
async def test_list_changed_while_running_updates_the_catalog(
    fixture_stdio: Callable[..., dict[str, Any]], protocol: str
) -> None:
    async with host_for({"drift": fixture_stdio("drifting_server", protocol=protocol)}) as host:
        seen: list[str] = []

        async def listener(catalog: Any) -> None:
            seen.append(catalog.server)

        host.on_catalog_change(listener)
        before = host.catalog("drift")
        assert before is not None and {t.name for t in before.tools} == {"echo", "shout", "mutate"}
        await host.call_tool("drift", "mutate", {"variant": "added"})
        await wait_until(lambda: "extra" in {t.name for t in host.catalog("drift").tools})  # type: ignore[union-attr]
        assert seen and seen[-1] == "drift"


async def test_a_server_killed_while_connected_fails_alone(
    example_stdio: Callable[..., dict[str, Any]],
) -> None:
    async with host_for({"victim": example_stdio("crm"), "other": example_stdio("tickets")}) as host:
        # The server proper, not codemode's launcher in front of it (whose cmdline names it too).
        # This host's crm server: started by codemode's launcher (other tests may run their own).
        victim = next(
            c
            for c in psutil.Process().children(recursive=True)
            if "crm_server.py" in " ".join(c.cmdline())
            and "_launcher.py" not in " ".join(c.cmdline())
            and "_launcher.py" in parent_cmdline(c)
        )
        victim.kill()
        with pytest.raises((OutcomeUnknownError, ServerUnavailableError)):
            await host.call_tool("victim", "get_customer", {"customer_id": "CUST-0001"})
        result = await host.call_tool("other", "get_ticket", {"ticket_id": "TCK-1001"})
        assert not result.is_error


async def test_a_crashed_server_is_reconnected_and_its_tools_work_again(
    example_stdio: Callable[..., dict[str, Any]],
) -> None:
    async with host_for({"crm": example_stdio("crm")}) as host:
        server = next(
            c
            for c in psutil.Process().children(recursive=True)
            if "crm_server.py" in " ".join(c.cmdline())
            and "_launcher.py" not in " ".join(c.cmdline())
            and "_launcher.py" in parent_cmdline(c)
        )
        server.kill()
        connection = host.connection("crm")
        # The call in flight when a server dies has an unknown outcome; the loss starts a reconnect.
        with pytest.raises((OutcomeUnknownError, ServerUnavailableError)):
            await host.call_tool("crm", "get_customer", {"customer_id": "CUST-0001"})
        await wait_until(lambda: connection.state is ConnectionState.READY, timeout=30)
        assert connection.reconnects == 1
        result = await host.call_tool("crm", "get_customer", {"customer_id": "CUST-0001"})
        assert not result.is_error


async def test_reconnect_can_be_turned_off(example_stdio: Callable[..., dict[str, Any]]) -> None:
    async with host_for({"crm": example_stdio("crm", reconnect=False)}) as host:
        connection = host.connection("crm")
        await host.call_tool("crm", "get_customer", {"customer_id": "CUST-0001"})
        victim = next(
            c
            for c in psutil.Process().children(recursive=True)
            if "crm_server.py" in " ".join(c.cmdline())
            and "_launcher.py" not in " ".join(c.cmdline())
            and "_launcher.py" in parent_cmdline(c)
        )
        victim.kill()
        with pytest.raises((OutcomeUnknownError, ServerUnavailableError)):
            await host.call_tool("crm", "get_customer", {"customer_id": "CUST-0001"})
        await wait_until(lambda: connection.state is ConnectionState.FAILED, timeout=15)
        assert connection.reconnects == 0


async def test_a_failure_keeps_its_stderr_reason_while_the_next_attempt_runs(tmp_path: Path) -> None:
    # The first start dies saying why on stderr; the second hangs silently. While it hangs, the
    # reason told to a user (or an agent importing the server) still quotes the first start's line.
    marker = tmp_path / "started-once"
    script = tmp_path / "flaky.py"
    script.write_text(
        "import pathlib, sys, time\n"
        f"marker = pathlib.Path({str(marker)!r})\n"
        "if not marker.exists():\n"
        "    marker.write_text('1')\n"
        "    sys.exit('ModuleNotFoundError: No module named first_start')\n"
        "time.sleep(60)\n",
        encoding="utf-8",
    )
    server = {"command": sys.executable, "args": [str(script)], "connect_timeout": 60}
    async with host_for({"flaky": server}) as host:
        connection = host.connection("flaky")
        await wait_until(lambda: connection.reconnects == 1, timeout=30)
        [status] = host.statuses()
        assert status.state is ConnectionState.CONNECTING
        assert "No module named first_start" in (status.failure() or ""), status
