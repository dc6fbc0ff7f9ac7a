"""The installed codemode version (what the CLI and the MCP server report)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version


def codemode_version() -> str:
    try:
        return version("codemode")
    except PackageNotFoundError:  # running from a checkout without an install
        return "0+unknown"
