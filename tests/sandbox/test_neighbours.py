"""Another codemode process on the same engine and state directory is left alone.

A neighbour (here: a warm pool in a subprocess, with its own pool label) keeps sandboxes running
while this suite starts managers, runs programs, sweeps orphans and counts what is left. Its
sandboxes must survive all of that, and none of our counts may include them. The rule behind the
orphan sweep (remove only when the owner is provably dead) is tested on labels directly.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from codemode.sandbox import Program, SandboxManager
from codemode.sandbox._docker import MACHINE_LABEL, OWNER_LABEL, machine_id, owner_is_dead
from codemode.sandbox._state import HostToken, StateDir, default_base

NEIGHBOUR = textwrap.dedent(
    """
    import sys
    import anyio
    from codemode.config import SandboxConfig
    from codemode.sandbox import SandboxManager

    async def main():
        config = SandboxConfig(backend=sys.argv[1], image=sys.argv[2], pool_size=2, wall_time_s=20.0)
        async with SandboxManager(config) as manager:
            await manager.wait_ready()
            print(manager.pool_id, flush=True)
            await anyio.to_thread.run_sync(sys.stdin.readline)  # until the test says stop
        print("stopped", flush=True)

    anyio.run(main)
    """
)


@dataclass
class Neighbour:
    proc: subprocess.Popen[str]
    pool_id: str
    containers_of: Callable[[str], list[str]]

    def dirs(self) -> set[Path]:
        """The neighbour's sandbox directories (its pid is the owner in their meta)."""
        base = default_base()
        found: set[Path] = set()
        entries: list[Path] = list(base.iterdir()) if base.is_dir() else []
        for entry in entries:
            meta = StateDir.read_meta(entry)
            token = HostToken.decode(str(meta.get("owner", ""))) if meta else None
            if token is not None and token.pid == self.proc.pid:
                found.add(entry)
        return found

    def containers(self) -> set[str]:
        return set(self.containers_of(self.pool_id))


@pytest.fixture
def neighbour(
    backend: str, make_config: Callable[..., Any], tmp_path: Path, leftovers: Any
) -> Iterator[Neighbour]:
    """A codemode process with a warm pool of two sandboxes, running until the test ends."""
    script = tmp_path / "neighbour.py"
    script.write_text(NEIGHBOUR)
    pool_id = f"neighbour-{uuid.uuid4().hex}"
    proc = subprocess.Popen(
        [sys.executable, str(script), backend, make_config().image],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # Its own pool label, not this suite's (which it would otherwise inherit).
        env={**os.environ, "CODEMODE_POOL_ID": pool_id},
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if line != f"{pool_id}\n":
        proc.kill()
        raise AssertionError(f"the neighbour did not start: {line!r} {proc.communicate()[1]}")
    try:
        yield Neighbour(proc, pool_id, leftovers.containers_of)
    finally:
        out, err = proc.communicate(input="stop\n", timeout=120)
        assert (proc.returncode, out) == (0, "stopped\n"), err
    assert leftovers.containers_of(pool_id) == []


pytestmark = [pytest.mark.integration, pytest.mark.anyio]


async def test_a_neighbour_s_sandboxes_survive_our_runs_counts_and_orphan_sweep(
    backend: str,
    neighbour: Neighbour,
    make_config: Callable[..., Any],
    stub_tree: Any,
    handler: Any,
    new_binding: Callable[..., Any],
    leftovers: Any,
    own_pool_label: str,
    no_leftovers: Callable[[], None],
) -> None:
    theirs_dirs = neighbour.dirs()
    theirs_containers = neighbour.containers()
    assert len(theirs_dirs) == 2
    assert len(theirs_containers) == (2 if backend == "docker" else 0)
    # Our counts do not include the neighbour's sandboxes.
    no_leftovers()

    # Entering sweeps orphans; the neighbour is alive, so nothing of it is one.
    async with SandboxManager(make_config(pool_size=1)) as manager:
        assert manager.pool_id == own_pool_label
        await manager.wait_ready()
        outcome = await manager.run(
            Program("6 * 7"), binding=new_binding(), modules=stub_tree, handler=handler
        )
        assert (outcome.status, outcome.result) == ("ok", 42)
        if backend == "docker":
            # Our containers carry our pool label, and only ours do.
            ours = set(leftovers.containers_of(manager.pool_id))
            assert ours
            assert not ours & theirs_containers
        assert not set(leftovers.dirs()) & theirs_dirs
    no_leftovers()
    assert neighbour.dirs() == theirs_dirs
    assert neighbour.containers() == theirs_containers
    assert neighbour.proc.poll() is None


# -- the rule of the orphan sweep ------------------------------------------------------------------


def _labels(token: HostToken, machine: str | None) -> dict[str, str]:
    labels = {OWNER_LABEL: token.encode()}
    if machine is not None:
        labels[MACHINE_LABEL] = machine
    return labels


def _dead_token() -> HostToken:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    # A pid that just exited, with a start time no live process has.
    return HostToken(HostToken.current().hostname, proc.pid, 1.0)


def test_only_a_provably_dead_owner_s_containers_are_orphans() -> None:
    me = HostToken.current()
    dead = _dead_token()
    assert owner_is_dead(_labels(dead, machine_id()))
    assert not owner_is_dead(_labels(me, machine_id())), "a live owner"
    # The same pid may mean another process elsewhere: another machine sharing the engine, or
    # another container (pid namespace) on this one. Nothing proves those owners dead.
    assert not owner_is_dead(_labels(dead, "another-boot-id/pid:[1]"))
    assert not owner_is_dead(_labels(HostToken("another-host", dead.pid, dead.started), machine_id()))
    # Containers of unknown origin (no owner, no machine: an older codemode, a hand-made one).
    assert not owner_is_dead(_labels(dead, None))
    assert not owner_is_dead({MACHINE_LABEL: machine_id()})
    assert not owner_is_dead({OWNER_LABEL: "garbage", MACHINE_LABEL: machine_id()})


def test_a_sandbox_directory_names_its_pool_and_is_an_orphan_only_once_its_owner_is_dead(
    tmp_path: Path,
) -> None:
    state = StateDir(tmp_path / "state", pool_id="pool-a")
    state.ensure()
    _, mine = state.new_sandbox("process")
    assert StateDir.read_meta(mine) == {"backend": "process", "pool": "pool-a", "owner": state.token.encode()}
    dead = _dead_token()
    _, theirs = state.new_sandbox("process")
    state.write_meta(theirs, {})
    (theirs / "meta.json").write_text(
        (theirs / "meta.json").read_text().replace(state.token.encode(), dead.encode())
    )
    assert [entry for entry, _ in state.orphans()] == [theirs]


def test_a_staging_directory_left_by_a_dead_host_is_an_orphan_but_one_being_prepared_is_not(
    tmp_path: Path,
) -> None:
    state = StateDir(tmp_path / "state")
    state.ensure()
    # A host that died between preparing a sandbox directory and renaming it into place.
    left = state.base / ".new-0123456789abcdef"
    left.mkdir()
    (left / "meta.json").write_text(f'{{"backend": "process", "owner": "{_dead_token().encode()}"}}')
    # A live host between mkdir and writing meta: nothing says whose it is, so it stays.
    preparing = state.base / ".new-fedcba9876543210"
    preparing.mkdir()
    # A live host's staging directory with meta.
    _, live = state.new_sandbox("process")
    live.rename(state.base / ".new-live")
    assert [entry for entry, _ in state.orphans()] == [left]
