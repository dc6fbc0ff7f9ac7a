"""The trees of the example servers and of third-party servers from PyPI type-check and import.

Connects through the real host (stdio), renders the tree, and runs ``check_export`` on it.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import anyio
import pytest

from codemode.config import config_from_mapping
from codemode.host import McpHost
from codemode.stubs import check_export, render_tree

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent

pytestmark = pytest.mark.slow


def _servers(tmp_path: Path) -> dict[str, dict[str, object]]:
    examples = REPO / "examples" / "servers"
    servers: dict[str, dict[str, object]] = {
        name: {"command": sys.executable, "args": [str(examples / f"{name}_server.py")]}
        for name in ("crm", "tickets", "docs")
    }
    servers["crm"]["args"] = [*servers["crm"]["args"], "--state-dir", str(tmp_path / "crm-state")]  # type: ignore[misc]
    for name, args in (("time", []), ("git", ["--repository", str(REPO)])):
        executable = BIN / f"mcp-server-{name}"
        if executable.exists() or shutil.which(f"mcp-server-{name}"):
            servers[name] = {
                "command": str(executable if executable.exists() else f"mcp-server-{name}"),
                "args": args,
            }
    return servers


def test_example_and_third_party_server_trees_type_check_and_import(tmp_path: Path):
    servers = _servers(tmp_path)
    if "time" not in servers or "git" not in servers:
        pytest.skip("mcp-server-time / mcp-server-git are not installed (pip install -e '.[dev]')")

    async def catalogs():
        async with McpHost(config_from_mapping({"servers": servers})) as host:
            return host.catalogs()

    listed = anyio.run(catalogs)
    assert sorted(c.server for c in listed) == sorted(servers)
    tree = render_tree(listed)
    report = check_export(tree, tmp_path / "tree")
    assert report.ok, report.summary()
    assert report.modules_imported >= 30
