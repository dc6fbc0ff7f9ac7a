"""A demo workspace: ``codemode init --demo`` (the example servers), on the process backend,
synced and approved, for tests that drive the CLI or ``codemode serve`` on it."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from codemode.cli._main import cli


def make_workspace(directory: Path, extra: str = "", *, pool_size: int = 1) -> Path:
    """``directory/codemode.toml``, with ``extra`` appended; its path."""
    config = directory / "codemode.toml"
    runner = CliRunner()
    assert runner.invoke(cli, ["init", "--demo", "--config", str(config)]).exit_code == 0
    sandbox = f'[sandbox]\nbackend = "process"\npool_size = {pool_size}\n'
    config.write_text(config.read_text().replace("[sandbox]\n", sandbox) + extra)
    for args in (["sync"], ["pin", "--approve"]):
        result = runner.invoke(cli, [*args, "--config", str(config)])
        assert result.exit_code == 0, result.output
    return config
