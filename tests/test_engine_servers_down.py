"""What the engine says of a server that is down: its one-line reason, and the note a failed
import of it gets (only for a principal that may see the server)."""

from __future__ import annotations

from codemode.broker import may_see_server
from codemode.config import config_from_mapping
from codemode.engine import ServerDown
from codemode.engine._down import explain_import_error, servers_down, unavailable_servers
from codemode.host import ConnectionState, ServerStatus

PYTHON_CRASH = """Traceback (most recent call last):
  File "/srv/server.py", line 3, in <module>
    import mcp_server_tme
ModuleNotFoundError: No module named 'mcp_server_tme'
"""
NODE_CRASH = """node:internal/modules/cjs/loader:1228
  throw err;
  ^

Error: Cannot find module '/srv/index.js'
    at Module._resolveFilename (node:internal/modules/cjs/loader:1225:15)
    at node:internal/main/run_main_module:28:49 {
  code: 'MODULE_NOT_FOUND',
  requireStack: []
}

Node.js v20.11.0
"""


def status(
    name: str,
    state: ConnectionState = ConnectionState.FAILED,
    error: str | None = "the server process exited or closed its output (Connection closed)",
    tail: str = "",
) -> ServerStatus:
    return ServerStatus(
        name=name,
        transport="stdio",
        target="python -m x",
        state=state,
        sdk_version="2",
        error=error,
        stderr_tail=tail,
    )


def test_a_failed_servers_reason_adds_the_stderr_line_that_names_the_error() -> None:
    exited = "the server process exited or closed its output (Connection closed)"
    cases = {
        PYTHON_CRASH: "ModuleNotFoundError: No module named 'mcp_server_tme'",
        NODE_CRASH: "Error: Cannot find module '/srv/index.js'",
        "starting\nboom: set API_KEY first\n": "boom: set API_KEY first",  # no error line: the last
    }
    for tail, said in cases.items():
        assert status("time", tail=tail).failure() == f"{exited}; on stderr it said: {said}"
    assert status("time").failure() == exited, "nothing on stderr: the host's reason alone"


def test_a_reason_is_one_line_and_shows_control_characters_as_escapes() -> None:
    failure = status("x", error="answered:\n\x1b[2Jcleared", tail="\u202eevil\n").failure()
    assert failure is not None
    assert "\n" not in failure and "\x1b" not in failure and "\u202e" not in failure
    assert "\\u001b[2Jcleared" in failure and "\\u202eevil" in failure


def test_ready_and_disabled_servers_are_not_down_and_a_reconnecting_one_is() -> None:
    statuses = [
        status("up", ConnectionState.READY, error=None),
        status("off", ConnectionState.DISABLED, error=None),
        status("retrying", ConnectionState.CONNECTING),
        status("time"),
    ]
    assert [down.server for down in servers_down(statuses)] == ["retrying", "time"]
    notice = ServerDown("nocmd", "command 'npx' was not found; is it installed and on PATH?").notice()
    assert notice.startswith("server \"nocmd\" did not start: command 'npx' was not found;")
    assert "PATH? Its tools are not available" in notice and "'codemode servers'" in notice


def explain(error_type: str, missed: set[str], may_see: set[str] | None = None) -> str:
    statuses = [
        status("crm", ConnectionState.READY, error=None),
        status("time", tail=PYTHON_CRASH),
        status("my-server.v2"),
        status("off", ConnectionState.DISABLED, error=None),
    ]
    visible = may_see if may_see is not None else {s.name for s in statuses}
    return explain_import_error(
        error_type,
        "the program's message",
        missed,
        lambda: unavailable_servers(statuses, lambda server: server in visible),
    )


def test_a_failed_import_of_a_down_server_says_why_in_every_form() -> None:
    for error_type, missed in [
        ("ModuleNotFoundError", {"servers.time"}),  # from servers.time import x
        ("ImportError", {"servers.time"}),  # from servers import time
        ("AttributeError", {"servers.time"}),  # import servers; servers.time.x
        ("ModuleNotFoundError", {"servers.time.get_time", "servers.time"}),
    ]:
        text = explain(error_type, missed)
        assert text.startswith("the program's message [codemode: "), text
        assert 'server "time" is down: the server process exited' in text, text
        assert "ModuleNotFoundError: No module named 'mcp_server_tme'" in text, text
    # The module name is the stub tree's: '-' and '.' in a server name become '_'.
    assert 'server "my-server.v2" is down' in explain("ModuleNotFoundError", {"servers.my_server_v2"})
    assert 'server "off" is disabled in the configuration (enabled = false)' in explain(
        "ModuleNotFoundError", {"servers.off"}
    )


def test_other_failures_are_left_as_the_program_raised_them() -> None:
    asked: list[int] = []

    def unavailable() -> dict[str, str]:
        asked.append(1)
        return {"servers.time": 'server "time" is down: x'}

    unchanged = "the program's message"
    assert explain_import_error("ZeroDivisionError", unchanged, {"servers.time"}, unavailable) == unchanged
    assert explain_import_error("ModuleNotFoundError", unchanged, {"numpy"}, unavailable) == unchanged
    assert not asked, "the statuses are looked at only for a failed import of a stub"
    assert explain("ModuleNotFoundError", {"servers.crm.nope"}) == unchanged, "crm is up"
    assert explain("ModuleNotFoundError", {"servers.nothing"}) == unchanged, "not configured"


def test_a_principal_that_may_not_see_a_server_learns_nothing_of_it() -> None:
    assert explain("ModuleNotFoundError", {"servers.time"}, may_see={"crm"}) == "the program's message"


def test_who_may_see_a_server_follows_the_tool_grants() -> None:
    policy = config_from_mapping(
        {
            "policy": {
                "principals": {
                    "crm-only": {"tools": ["crm/*"]},
                    "no-time": {"deny_tools": ["time/*"]},
                    "some-time": {"deny_tools": ["time/delete_*"]},
                }
            }
        }
    ).policy
    assert may_see_server(policy, "local", "time"), "allow mode: every server"
    assert not may_see_server(policy, "crm-only", "time")
    assert may_see_server(policy, "crm-only", "crm")
    assert not may_see_server(policy, "no-time", "time")
    assert may_see_server(policy, "some-time", "time"), "a partial deny leaves the server's other tools"
    deny = config_from_mapping({"policy": {"mode": "deny", "principals": {"a": {"tools": ["crm/x"]}}}}).policy
    assert not may_see_server(deny, "stranger", "crm") and may_see_server(deny, "a", "crm")
