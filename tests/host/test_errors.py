"""Why a connection failed, said in terms of the configuration the user wrote."""

from __future__ import annotations

import errno

import pytest
from mcp.client.auth import OAuthTokenError
from mcp.shared.exceptions import MCPError

from codemode.config import HttpServerConfig, StdioServerConfig
from codemode.errors import CodemodeError, ServerConnectionError
from codemode.host._errors import describe_exception, root_cause

STDIO = StdioServerConfig(command="crm-server", cwd="/srv/crm", connect_timeout=7)
HTTP = HttpServerConfig(url="http://127.0.0.1:9/mcp")


class ConnectError(Exception):
    """Named like httpx's connection errors."""


def test_the_root_cause_is_dug_out_of_nested_groups() -> None:
    leaf = FileNotFoundError(2, "No such file")
    wrapped = BaseExceptionGroup("outer", [ExceptionGroup("inner", [leaf])])
    assert root_cause(wrapped) is leaf


@pytest.mark.parametrize(
    ("exc", "config", "expected"),
    [
        (ServerConnectionError("crm", "x", "the reason itself"), STDIO, "the reason itself"),
        (CodemodeError("a codemode error"), STDIO, "a codemode error"),
        (
            FileNotFoundError(2, "No such file", "/srv/crm"),
            STDIO,
            "working directory '/srv/crm' does not exist",
        ),
        (FileNotFoundError(2, "No such file", "crm-server"), STDIO, "command 'crm-server' was not found"),
        (PermissionError(13, "denied", "crm-server"), STDIO, "is not executable"),
        (TimeoutError(), STDIO, "no answer within connect_timeout = 7 s"),
        (TimeoutError("slow start"), STDIO, "slow start"),
        (MCPError(-32000, "Connection closed"), STDIO, "exited or closed its output"),
        (MCPError(-32603, "bad init"), HTTP, "answered with an error: bad init"),
        (ConnectionRefusedError(errno.ECONNREFUSED, "refused"), HTTP, "connection refused"),
        (
            ConnectError("all attempts failed"),
            HTTP,
            "could not reach http://127.0.0.1:9/mcp: all attempts failed",
        ),
        (ValueError("odd"), STDIO, "ValueError: odd"),
        (KeyError(), HTTP, "KeyError"),
    ],
)
def test_each_failure_reads_as_what_to_change(
    exc: BaseException, config: StdioServerConfig | HttpServerConfig, expected: str
) -> None:
    assert expected in describe_exception(
        ExceptionGroup("group", [exc]) if isinstance(exc, Exception) else exc, config
    )


def test_a_status_never_carries_a_secret_a_server_wrote_and_stays_short() -> None:
    echoed = OAuthTokenError('Token exchange failed (400): {"access_token": "sk-live-0123456789abcdef"}')
    described = describe_exception(echoed, HTTP)
    assert "sk-live-0123456789abcdef" not in described and "Token exchange failed (400)" in described
    assert len(describe_exception(RuntimeError("x" * 100_000), HTTP)) <= 1001
