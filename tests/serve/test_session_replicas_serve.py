"""Two `codemode serve` replicas on one ledger: a `run_code` naming a sandbox session the other
replica holds is answered with the tool's error naming the session and that replica (no
traceback logged), never with a fresh, empty session; once the holder closes it (here: shuts
down), the other replica opens it.

Two stdio servers on one workspace, each with its own config file naming its replica."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.serve.conftest import make_workspace
from tests.serve.test_file_tool_errors import assert_no_crash_logged, serving
from tests.serve.test_serve import text_of

pytestmark = [pytest.mark.integration, pytest.mark.anyio]


def _replica_config(config: Path, name: str) -> Path:
    """A copy of ``config`` beside it (same ledger, same servers) that names its replica."""
    text = config.read_text(encoding="utf-8")
    assert "\n[serve]\n" not in text, "the demo config grew a [serve] table: set replica inside it"
    named = config.with_name(f"codemode-{name}.toml")
    named.write_text(text + f'\n[serve]\nreplica = "{name}"\n', encoding="utf-8")
    return named


@pytest.fixture
def replica_configs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    # A sync fixture: the CLI that makes the workspace runs an event loop of its own.
    config = make_workspace(tmp_path_factory.mktemp("replicas"))
    return _replica_config(config, "serve-a"), _replica_config(config, "serve-b")


async def test_a_session_of_one_replica_is_refused_by_the_other_with_both_names(
    replica_configs: tuple[Path, Path], tmp_path: Path
) -> None:
    a_config, b_config = replica_configs
    errlog_a, errlog_b = tmp_path / "a.log", tmp_path / "b.log"
    async with serving(b_config, errlog_b) as b:
        async with serving(a_config, errlog_a) as a:
            kept = await a.call_tool("run_code", {"code": "x = 41\nx + 1", "session_id": "work"})
            assert not kept.is_error, text_of(kept)
            refused = await b.call_tool("run_code", {"code": "x", "session_id": "work"})
            assert refused.is_error
            text = text_of(refused)
            assert "sandbox session 'work' is held by replica 'serve-a'" in text, text
            assert "not by this one ('serve-b')" in text and "new session_id" in text, text
            again = await a.call_tool("run_code", {"code": "x", "session_id": "work"})
            assert not again.is_error and "41" in text_of(again), text_of(again)
        # serve-a shut down: its sessions closed and released.
        opened = await b.call_tool("run_code", {"code": "x = 7\nx", "session_id": "work"})
        assert not opened.is_error and "7" in text_of(opened), text_of(opened)
    assert_no_crash_logged(errlog_b)
