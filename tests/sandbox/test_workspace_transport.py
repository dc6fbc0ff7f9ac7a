"""A run's workspace inside the sandbox, on every backend: in before the program, back after it.

Where workspaces are kept is not the sandbox's business (``tests/workspace``); here: the files
arrive, the program sees them at ``$CODEMODE_WORKSPACE`` (``/workspace`` in a container or
bwrap), what it leaves comes back, a write past the quota fails in the program, links and FIFOs
are reported instead of read, and a sandbox never shows one run's files to another.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import pytest

from codemode.sandbox import BackendName, Program, SandboxManager, WorkspaceFiles, WorkspaceQuota

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

QUOTA = WorkspaceQuota(bytes=64 * 1024, files=20)


def with_files(code: str, files: dict[str, bytes] | None = None, quota: WorkspaceQuota = QUOTA) -> Program:
    return Program(code, workspace=WorkspaceFiles(files or {}, quota.bytes, quota.files))


async def test_files_go_in_and_what_the_program_leaves_comes_back(
    backend: BackendName,
    make_config: Callable[..., Any],
    stub_tree: Any,
    handler: Any,
    new_binding: Callable[..., Any],
) -> None:
    code = (
        "import os, pathlib\n"
        "root = pathlib.Path(os.environ['CODEMODE_WORKSPACE'])\n"
        "seen = (root / 'notes.txt').read_text()\n"
        "(root / 'out').mkdir()\n"
        "(root / 'out' / 'report.csv').write_bytes(b'a,b\\n1,2\\n')\n"
        "(root / 'notes.txt').unlink()\n"
        "[str(root), seen]\n"
    )
    async with SandboxManager(make_config(), workspace=QUOTA) as manager:
        assert manager.has_workspace
        outcome = await manager.run(
            with_files(code, {"notes.txt": b"from before"}),
            binding=new_binding(),
            modules=stub_tree,
            handler=handler,
        )
    assert outcome.status == "ok", outcome.error
    root, seen = cast(list[str], outcome.result)
    assert seen == "from before"
    if backend == "process":  # a host folder of the sandbox's own, named by the env var
        assert root.endswith("/workspace") and root != "/workspace"
    else:
        assert root == "/workspace"
    assert outcome.workspace is not None
    assert outcome.workspace.files == {"out/report.csv": b"a,b\n1,2\n"}
    assert (outcome.workspace.refused, outcome.workspace.error) == ({}, None)


async def test_a_write_past_the_byte_quota_fails_in_the_program(
    backend: BackendName,
    make_config: Callable[..., Any],
    stub_tree: Any,
    handler: Any,
    new_binding: Callable[..., Any],
) -> None:
    code = (
        "import os\n"
        "with open(os.path.join(os.environ['CODEMODE_WORKSPACE'], 'big.bin'), 'wb') as f:\n"
        "    f.write(b'x' * (256 * 1024))\n"
    )
    async with SandboxManager(make_config(), workspace=QUOTA) as manager:
        outcome = await manager.run(
            with_files(code, {"keep.txt": b"earlier"}),
            binding=new_binding(),
            modules=stub_tree,
            handler=handler,
        )
    assert outcome.status == "error"
    assert outcome.error is not None
    # Docker and bwrap stop the write itself (a tmpfs of the quota's size); the process backend
    # finds the overrun when the program ends. Either way the program's run fails, saying why.
    if backend == "process":
        assert outcome.error.type == "WorkspaceQuotaExceeded"
    else:
        assert outcome.error.type == "OSError"
        assert "No space left on device" in outcome.error.message
    assert "[workspace] quota_bytes" in outcome.error.message
    assert "its files from before the run are" in outcome.error.message
    assert outcome.workspace is not None
    assert (outcome.workspace.files, outcome.workspace.error is not None) == ({}, True)


async def test_more_files_than_the_quota_fail_the_run(
    backend: BackendName,
    make_config: Callable[..., Any],
    stub_tree: Any,
    handler: Any,
    new_binding: Callable[..., Any],
) -> None:
    quota = WorkspaceQuota(bytes=64 * 1024, files=3)
    code = (
        "import os\n"
        "root = os.environ['CODEMODE_WORKSPACE']\n"
        "for i in range(6):\n"
        "    open(os.path.join(root, f'f{i}'), 'w').close()\n"
    )
    async with SandboxManager(make_config(), workspace=quota) as manager:
        outcome = await manager.run(
            with_files(code, quota=quota), binding=new_binding(), modules=stub_tree, handler=handler
        )
    assert outcome.status == "error"
    assert outcome.error is not None
    assert "quota_files" in outcome.error.message
    assert outcome.workspace is not None
    assert outcome.workspace.files == {}
    assert outcome.workspace.error is not None


async def test_links_and_fifos_are_reported_not_read(
    backend: BackendName,
    make_config: Callable[..., Any],
    stub_tree: Any,
    handler: Any,
    new_binding: Callable[..., Any],
) -> None:
    code = (
        "import os\n"
        "root = os.environ['CODEMODE_WORKSPACE']\n"
        "os.symlink('/etc/passwd', os.path.join(root, 'passwd'))\n"
        "os.symlink('/etc', os.path.join(root, 'etc'))\n"
        "os.mkfifo(os.path.join(root, 'pipe'))\n"
        "open(os.path.join(root, 'real.txt'), 'w').write('kept')\n"
    )
    async with SandboxManager(make_config(), workspace=QUOTA) as manager:
        outcome = await manager.run(
            with_files(code), binding=new_binding(), modules=stub_tree, handler=handler
        )
    assert outcome.status == "ok", outcome.error
    assert outcome.workspace is not None
    assert outcome.workspace.files == {"real.txt": b"kept"}
    refused = outcome.workspace.refused
    assert set(refused) == {"passwd", "etc", "pipe"}
    assert refused["passwd"].startswith("a symbolic link")
    assert refused["pipe"].startswith("a FIFO")


async def test_a_session_sandbox_holds_exactly_the_files_each_run_brings(
    backend: BackendName,
    make_config: Callable[..., Any],
    stub_tree: Any,
    handler: Any,
    new_binding: Callable[..., Any],
) -> None:
    """The one case a sandbox serves two runs: the second sees its own files, none left over."""
    listing = "import os\nsorted(os.listdir(os.environ['CODEMODE_WORKSPACE']))\n"
    leave_x = "open(os.path.join(os.environ['CODEMODE_WORKSPACE'], 'x'), 'w')\n"
    async with SandboxManager(make_config(pool_size=1), workspace=QUOTA) as manager:
        session = await manager.open_session(principal="alice", tenant="acme")
        async with session:
            first = await session.run(
                with_files(listing + leave_x, {"a": b"1"}),
                binding=new_binding(),
                modules=stub_tree,
                handler=handler,
            )
            second = await session.run(
                with_files(listing, {"b": b"2"}), binding=new_binding(), modules=stub_tree, handler=handler
            )
    assert first.status == second.status == "ok"
    assert second.result == ["b"]


async def test_a_warm_pool_never_carries_one_runs_workspace_into_another(
    backend: BackendName,
    make_config: Callable[..., Any],
    stub_tree: Any,
    handler: Any,
    new_binding: Callable[..., Any],
) -> None:
    listing = "import os\nsorted(os.listdir(os.environ['CODEMODE_WORKSPACE']))\n"
    async with SandboxManager(make_config(pool_size=1), workspace=QUOTA) as manager:
        await manager.wait_ready()
        alice = await manager.run(
            with_files(listing, {"alice-secret": b"s"}),
            binding=new_binding(principal="alice"),
            modules=stub_tree,
            handler=handler,
        )
        await manager.wait_ready()
        bob = await manager.run(
            with_files(listing), binding=new_binding(principal="bob"), modules=stub_tree, handler=handler
        )
    assert alice.result == ["alice-secret"]
    assert bob.result == []
    assert alice.sandbox_id != bob.sandbox_id


async def test_a_run_without_a_workspace_sees_none(
    backend: BackendName,
    make_config: Callable[..., Any],
    stub_tree: Any,
    handler: Any,
    new_binding: Callable[..., Any],
) -> None:
    async with SandboxManager(make_config()) as manager:
        assert not manager.has_workspace
        outcome = await manager.run(
            Program("import os\n[os.environ.get('CODEMODE_WORKSPACE'), os.path.exists('/workspace')]"),
            binding=new_binding(),
            modules=stub_tree,
            handler=handler,
        )
    assert outcome.result == [None, False]
    assert outcome.workspace is None
