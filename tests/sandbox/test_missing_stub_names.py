"""A name a program gets wrong says what exists, whichever way the program reached for it.

``from servers.time import nope`` and ``import servers.time as t; t.nope`` give the same message
(the server's tools and the closest names), and so do the two forms one level up (the servers).
Run in the real sandbox (process backend) against mcp-server-time from PyPI.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from codemode import CodeMode, config_from_mapping
from codemode.catalog import approve, load_lock, observe, save_lock
from codemode.host import McpHost

pytestmark = [pytest.mark.integration, pytest.mark.anyio]


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[CodeMode]:
    config = config_from_mapping(
        {
            "servers": {"time": {"command": sys.executable, "args": ["-m", "mcp_server_time"]}},
            "sandbox": {"backend": "process", "pool_size": 1},
        },
        base_dir=tmp_path,
    )
    async with McpHost(config) as host:
        lock = load_lock(config.lock_path)
        for catalog in host.catalogs():
            lock, _ = observe(lock, catalog)
        save_lock(config.lock_path, approve(lock)[0])
    async with CodeMode(config) as cm:
        yield cm


async def error_of(engine: CodeMode, program: str) -> tuple[str, str]:
    """The type and the message of the error ``program`` ends with."""
    result = await engine.run(program)
    assert result.status == "error", result.result
    assert result.error is not None
    return result.error.type, result.error.message


@pytest.mark.parametrize(
    ("attribute_form", "from_form", "expected"),
    [
        (
            "import servers.time as t\nt.get_curent_time()\n",
            "from servers.time import get_curent_time\n",
            [
                "servers.time has no tool 'get_curent_time'.",
                "Did you mean get_current_time?",
                "Its tools: convert_time, get_current_time.",
            ],
        ),
        (
            "import servers.time\nservers.time.unknown()\n",
            "from servers.time import unknown\n",
            ["servers.time has no tool 'unknown'.", "Its tools: convert_time, get_current_time."],
        ),
        (
            "import servers\nservers.tiem\n",
            "from servers import tiem\n",
            ["servers has no server 'tiem'.", "Did you mean time?", "Servers: time."],
        ),
    ],
)
async def test_a_wrong_attribute_says_what_the_from_import_says(
    engine: CodeMode, attribute_form: str, from_form: str, expected: list[str]
) -> None:
    attribute_error, by_attribute = await error_of(engine, attribute_form)
    import_error, by_import = await error_of(engine, from_form)
    assert (attribute_error, import_error) == ("AttributeError", "ModuleNotFoundError")
    assert by_attribute == by_import
    for part in expected:
        assert part in by_attribute


async def test_hasattr_and_getattr_with_a_default_still_work(engine: CodeMode) -> None:
    program = """
import servers
import servers.time as t
[hasattr(t, "nope"), getattr(t, "nope", "fallback"), hasattr(t, "_private"),
 hasattr(servers, "tiem"), callable(t.get_current_time)]
"""
    result = await engine.run(program)
    assert result.status == "ok", result.error
    assert result.result == [False, "fallback", False, False, True]
