"""Workspaces through the engine on real sandboxes: files outlive a run, and only their owner's run
sees them (process, bwrap and docker backends)."""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from codemode import CodeMode, config_from_mapping
from codemode.config import Config
from codemode.workspace import WorkspaceError, WorkspaceKey
from tests.workspace._stores import configured_store

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

WRITE = (
    "import os, pathlib\n"
    "root = pathlib.Path(os.environ['CODEMODE_WORKSPACE'])\n"
    "(root / 'reports').mkdir(exist_ok=True)\n"
    "(root / 'reports' / 'q3.csv').write_text(INPUT)\n"
    "'written'\n"
)
READ = (
    "import os, pathlib\n"
    "root = pathlib.Path(os.environ['CODEMODE_WORKSPACE'])\n"
    "sorted(str(p.relative_to(root)) + '=' + p.read_text() for p in root.rglob('*') if p.is_file())\n"
)


@pytest.fixture(
    params=[
        "process",
        pytest.param("bwrap", marks=pytest.mark.bwrap),
        pytest.param("docker", marks=pytest.mark.docker),
    ]
)
def make_config(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[..., Config]:
    backend: str = request.param
    sandbox: dict[str, Any] = {"backend": backend, "pool_size": 1}
    if backend == "docker":
        sandbox["image"] = request.getfixturevalue("docker_image")
    elif backend == "bwrap":
        from codemode.sandbox._bwrap import probe_bwrap

        layout, why = probe_bwrap(Config().sandbox)
        if layout is None:
            if os.environ.get("CODEMODE_REQUIRE_BWRAP", "").strip() not in ("", "0", "false", "no"):
                pytest.fail(f"CODEMODE_REQUIRE_BWRAP is set but {why}")
            pytest.skip(f"bwrap cannot run sandboxes here: {why}")

    def make(**workspace: Any) -> Config:
        data: dict[str, Any] = {
            "sandbox": sandbox,
            "workspace": {"quota_bytes": 4096, "quota_files": 8, **workspace},
        }
        return config_from_mapping(data, base_dir=tmp_path)

    return make


@pytest.fixture
async def engine(make_config: Callable[..., Config]) -> AsyncIterator[CodeMode]:
    async with CodeMode(make_config()) as cm:
        yield cm


async def test_files_written_in_one_run_are_there_in_the_next(engine: CodeMode) -> None:
    first = await engine.run(WRITE, inputs="a,b\n1,2\n", principal="alice", tenant="acme")
    assert (first.status, first.result) == ("ok", "written")
    second = await engine.run(READ, principal="alice", tenant="acme")
    assert second.result == ["reports/q3.csv=a,b\n1,2\n"]
    with configured_store(engine.config) as store:
        assert store.load(WorkspaceKey("acme", "alice")) == {"reports/q3.csv": b"a,b\n1,2\n"}


async def test_another_principal_tenant_or_session_never_sees_them(engine: CodeMode) -> None:
    await engine.run(WRITE, inputs="secret", principal="alice", tenant="acme")
    assert (await engine.run(READ, principal="bob", tenant="acme")).result == []
    assert (await engine.run(READ, principal="alice", tenant="globex")).result == []
    session = await engine.open_session(principal="alice", tenant="acme")
    assert (await engine.run(READ, principal="alice", tenant="acme", session_id=session)).result == []
    # The session's own workspace outlives its runs too, apart from the principal's.
    await engine.run(WRITE, inputs="in session", principal="alice", tenant="acme", session_id=session)
    again = await engine.run(READ, principal="alice", tenant="acme", session_id=session)
    assert again.result == ["reports/q3.csv=in session"]
    assert (await engine.run(READ, principal="alice", tenant="acme")).result == ["reports/q3.csv=secret"]


async def test_a_write_past_the_quota_fails_in_the_program_and_keeps_earlier_files(engine: CodeMode) -> None:
    await engine.run(WRITE, inputs="earlier", principal="alice", tenant="acme")
    big = (
        "import os\n"
        "open(os.path.join(os.environ['CODEMODE_WORKSPACE'], 'new.txt'), 'w').write('also new')\n"
        "open(os.path.join(os.environ['CODEMODE_WORKSPACE'], 'big.bin'), 'wb').write(b'x' * 65536)\n"
    )
    failed = await engine.run(big, principal="alice", tenant="acme")
    assert failed.status == "error"
    assert failed.error is not None
    assert "quota_bytes" in failed.error.message
    assert "nothing this run wrote was kept" in failed.stderr
    assert (await engine.run(READ, principal="alice", tenant="acme")).result == ["reports/q3.csv=earlier"]


async def test_links_and_fifos_are_not_kept_and_the_run_says_so(engine: CodeMode) -> None:
    code = (
        "import os\n"
        "root = os.environ['CODEMODE_WORKSPACE']\n"
        "os.symlink('/etc/passwd', os.path.join(root, 'passwd'))\n"
        "os.mkfifo(os.path.join(root, 'pipe'))\n"
        "open(os.path.join(root, 'kept.txt'), 'w').write('yes')\n"
    )
    result = await engine.run(code, principal="alice", tenant="acme")
    assert result.status == "ok"
    assert "'passwd' was not kept: it is a symbolic link" in result.stderr
    assert "'pipe' was not kept: it is a FIFO" in result.stderr
    assert (await engine.run(READ, principal="alice", tenant="acme")).result == ["kept.txt=yes"]


async def test_a_disabled_workspace_gives_runs_none(make_config: Callable[..., Config]) -> None:
    async with CodeMode(make_config(enabled=False)) as cm:
        result = await cm.run("import os\n[os.environ.get('CODEMODE_WORKSPACE')]")
    assert result.result == [None]


async def test_unused_workspaces_are_pruned_when_the_engine_starts(
    make_config: Callable[..., Config],
) -> None:
    config = make_config(ttl_s=3600)
    # Last used two hours ago (the engine's store reads the wall clock).
    with configured_store(config, clock=lambda: time.time() - 7200) as store:
        store.commit(WorkspaceKey("acme", "alice"), {"old.txt": b"1"})
    async with CodeMode(config):
        pass
    with configured_store(config) as store:
        assert store.workspaces() == []


async def test_a_workspace_whose_files_are_missing_stops_the_run_and_loses_nothing(engine: CodeMode) -> None:
    await engine.run(WRITE, inputs="kept", principal="alice", tenant="acme")
    folder = engine.config.workspace_root / WorkspaceKey("acme", "alice").digest
    moved = folder.parent.parent / "moved-away"
    folder.rename(moved)  # as on a replica whose [workspace] root is not the shared storage
    with pytest.raises(WorkspaceError, match="workspace rm --all --tenant acme --principal alice"):
        await engine.run(READ, principal="alice", tenant="acme")
    assert not folder.exists(), "no empty workspace was committed in its place"
    with configured_store(engine.config) as store:
        assert [info.missing for info in store.workspaces()] == [True]
        assert store.remove(WorkspaceKey("acme", "alice"))
    assert (await engine.run(READ, principal="alice", tenant="acme")).result == []
    assert any(path.name == "q3.csv" for path in moved.rglob("*"))
