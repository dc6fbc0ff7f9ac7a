"""The sandbox wire contract: one file that both ends read.

``codemode/sandbox/_wire.py`` is the host's module and, staged byte for byte, the runtime's
``codemode_runtime._wire``. These tests hold the two ends to it: the staged copies are the same
bytes, neither end spells a protocol constant of its own, and a changed contract changes the
runtime digest and so rebuilds the image. ``test_wire_messages.py`` holds the host's validators
and every message kind to it; ``test_wire_runtime.py`` runs the real runtime against the host.
"""

# pyright: reportPrivateUsage=false
# (the host's validators and message classifier are what these tests hold to the contract)

from __future__ import annotations

import threading
import types
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import docker
import pytest

from codemode.sandbox import _files, build_image
from codemode.sandbox import _wire as wire
from codemode.sandbox._docker import RUNTIME_LABEL
from codemode.sandbox._docker_api import docker_api
from codemode.sandbox._files import (
    BOOT_SCRIPT,
    RUNTIME_PACKAGE,
    WIRE_MODULE,
    WIRE_SOURCE,
    install_runtime,
    runtime_digest,
    runtime_files,
    sandbox_dir,
    stage_build_context,
)

pytestmark = pytest.mark.anyio

HOST_MODULES = ("_channel.py", "_channel_messages.py", "_framing.py", "_outcome.py")


# -- one source ----------------------------------------------------------------------------------


def test_every_staged_runtime_holds_the_hosts_wire_module_byte_for_byte(tmp_path: Path) -> None:
    source = WIRE_SOURCE.read_bytes()
    assert Path(wire.__file__).resolve() == WIRE_SOURCE
    base = tmp_path / "base"
    base.mkdir()
    installed = install_runtime(base)  # the process and bwrap backends' copy
    assert (installed / WIRE_MODULE).read_bytes() == source
    context = tmp_path / "context"
    context.mkdir()
    stage_build_context(context)  # what `codemode sandbox build` sends to Docker
    assert (context / "runtime" / WIRE_MODULE).read_bytes() == source
    assert (context / "Dockerfile").read_bytes() == (sandbox_dir() / "Dockerfile").read_bytes()
    staged = sorted(p.relative_to(installed).as_posix() for p in installed.rglob("*") if p.is_file())
    assert staged == list(runtime_files())
    assert {BOOT_SCRIPT, f"{RUNTIME_PACKAGE}/__init__.py", f"{RUNTIME_PACKAGE}/__init__.pyi"} <= set(staged)


def test_in_a_checkout_the_runtimes_wire_module_is_a_link_to_the_hosts() -> None:
    link = sandbox_dir() / "runtime" / WIRE_MODULE
    if "_bundled" in sandbox_dir().parts:
        pytest.skip("an installed wheel holds a copy (staging replaces it with the host's file)")
    assert link.is_symlink(), f"{link} must be a symlink to {WIRE_SOURCE}, not a copy"
    assert link.resolve() == WIRE_SOURCE


def test_host_and_runtime_read_the_same_constants(runtime_wire: types.ModuleType) -> None:
    def constants(module: types.ModuleType) -> dict[str, Any]:
        return {
            name: value
            for name, value in vars(module).items()
            if name.isupper() and isinstance(value, int | str | frozenset | tuple)
        }

    host = constants(wire)
    assert len(host) > 30, sorted(host)
    assert constants(runtime_wire) == host
    assert runtime_wire.HEADER.format == wire.HEADER.format


# Literals that belong to the contract: each end must take them from ``_wire``, never spell them.
# (``read_resource`` and ``get_prompt`` are left out: they are the runtime API's names as well.)
_CONTRACT_LITERALS = (
    '">I"',
    "-32000",
    "-32001",
    "-3260",
    '"channel.sock"',
    '"/run/codemode"',
    '"CODEMODE_CHANNEL_DIR"',
    '"2.0"',
    '"hello"',
    '"import"',
    '"call"',
    '"run"',
    '"snapshot"',
    "16 * 1024 * 1024",
)


@pytest.mark.parametrize("end", ["runtime", "host"])
def test_neither_end_spells_a_protocol_constant_of_its_own(end: str, staged: Path) -> None:
    if end == "runtime":
        files = [p for p in (staged / RUNTIME_PACKAGE).glob("*.py") if p.name != "_wire.py"]
        files.append(staged / BOOT_SCRIPT)
    else:
        files = [WIRE_SOURCE.with_name(name) for name in HOST_MODULES]
    assert len(files) >= 3
    found = [
        f"{path.name}: {literal}"
        for path in files
        for literal in _CONTRACT_LITERALS
        if literal in path.read_text()
    ]
    assert found == []


def test_the_runtime_digest_follows_the_wire_contract(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = runtime_digest()
    assert runtime_digest() == before
    changed = tmp_path / "_wire.py"
    changed.write_bytes(WIRE_SOURCE.read_bytes() + b"\n# a changed contract\n")
    monkeypatch.setattr(_files, "WIRE_SOURCE", changed)
    after = runtime_digest()
    assert after != before
    base = tmp_path / "base"
    base.mkdir()
    installed = install_runtime(base)
    assert installed.name == f"runtime-{after}"
    assert (installed / WIRE_MODULE).read_bytes() == changed.read_bytes()


def test_host_processes_installing_the_runtime_at_once_each_get_a_whole_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Test workers or batch workers starting together all stage the runtime; the first rename wins
    and nobody's staging folder is pulled from under it."""
    starters = 4
    all_staging = threading.Barrier(starters, timeout=30)
    stage = _files.stage_runtime

    def stage_together(target: Path) -> None:
        stage(target)
        all_staging.wait()  # every starter is mid-install at once

    monkeypatch.setattr(_files, "stage_runtime", stage_together)
    base = tmp_path / "base"
    base.mkdir()
    with ThreadPoolExecutor(starters) as pool:
        installed = [
            future.result() for future in [pool.submit(install_runtime, base) for _ in range(starters)]
        ]
    assert len(set(installed)) == 1
    assert sorted(path.name for path in base.iterdir()) == [installed[0].name]
    assert all((installed[0] / name).is_file() for name in runtime_files())


# -- the image follows the contract --------------------------------------------------------------


@pytest.mark.docker
@pytest.mark.slow
def test_sandbox_build_rebuilds_the_image_when_the_wire_contract_changes(
    docker_image: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tag = f"codemode-sandbox-wiretest:{uuid.uuid4().hex[:12]}"
    built: list[str] = []

    def with_marker(marker: str) -> None:
        changed = tmp_path / f"{marker}.py"
        changed.write_bytes(WIRE_SOURCE.read_bytes() + f"\n# {marker}\n".encode())
        monkeypatch.setattr(_files, "WIRE_SOURCE", changed)

    def wire_in_image() -> str:
        client = docker.from_env()
        try:
            output = client.containers.run(
                tag,
                entrypoint=["python3", "-c", f"print(open('/opt/codemode/{WIRE_MODULE}').read())"],
                network_disabled=True,
                remove=True,
            )
        finally:
            client.close()
        return output.decode()

    try:
        with_marker("contract-a")
        first = build_image(tag, pull=False)
        built.append(first.image_id)
        assert first.rebuilt
        again = build_image(tag, pull=False)
        assert not again.rebuilt and again.image_id == first.image_id
        assert wire_in_image().rstrip().endswith("# contract-a")

        with_marker("contract-b")
        second = build_image(tag, pull=False)
        built.append(second.image_id)
        assert second.rebuilt and second.image_id != first.image_id
        api = docker_api()
        try:
            info = api.image(tag)
        finally:
            api.close()
        assert info is not None and info[1][RUNTIME_LABEL] == runtime_digest()
        assert wire_in_image().rstrip().endswith("# contract-b")
    finally:
        api = docker_api()
        try:
            for image_id in reversed(built):
                api.remove_image(image_id)
        finally:
            api.close()
