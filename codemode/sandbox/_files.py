"""The files that make a sandbox: the Dockerfile and the in-sandbox runtime, and their digest.

The runtime is the ``codemode_runtime`` package under ``sandbox/runtime/`` plus its boot script,
with one module taken from the host package: the channel's wire contract
(``codemode/sandbox/_wire.py``), staged as ``codemode_runtime/_wire.py`` so that both ends read
the same bytes. (In a checkout that path is a symlink to the host's file; staging copies the
host's file whatever is there.) Every way the runtime reaches a sandbox goes through
:func:`runtime_files`: the Docker build context (:func:`stage_build_context`) and the process and
bwrap backends' read-only copy (:func:`install_runtime`).

The digest covers the Dockerfile and every staged file. It labels a built image
(``codemode.runtime``) so ``codemode sandbox build`` and ``doctor`` notice an image built from
another version of the runtime or of the wire contract, and names the installed copy.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from pathlib import Path

from codemode._resources import resource_dir

__all__ = [
    "BOOT_SCRIPT",
    "RUNTIME_PACKAGE",
    "WIRE_MODULE",
    "install_runtime",
    "runtime_digest",
    "runtime_files",
    "sandbox_dir",
    "stage_build_context",
    "stage_runtime",
]

BOOT_SCRIPT = "codemode_boot.py"
RUNTIME_PACKAGE = "codemode_runtime"
WIRE_MODULE = f"{RUNTIME_PACKAGE}/_wire.py"
"""Where the wire contract sits in a staged runtime (relative to the runtime directory)."""
WIRE_SOURCE = Path(__file__).resolve().with_name("_wire.py")
_SUFFIXES = (".py", ".pyi")


def sandbox_dir() -> Path:
    """The directory holding ``Dockerfile`` and ``runtime/``."""
    return resource_dir("sandbox")


def runtime_files() -> dict[str, Path]:
    """What a runtime directory holds: relative POSIX path -> the file it is copied from, sorted."""
    root = sandbox_dir() / "runtime"
    files: dict[str, Path] = {}
    for path in root.rglob("*"):
        relative = path.relative_to(root)
        if "__pycache__" in relative.parts or path.suffix not in _SUFFIXES or not path.is_file():
            continue
        files[relative.as_posix()] = path
    files[WIRE_MODULE] = WIRE_SOURCE
    if BOOT_SCRIPT not in files or f"{RUNTIME_PACKAGE}/__init__.py" not in files:
        raise FileNotFoundError(f"the sandbox runtime is incomplete in {root}")
    return dict(sorted(files.items()))


def runtime_digest() -> str:
    """Short digest of the Dockerfile and the staged runtime (what an image is built from)."""
    digest = hashlib.sha256()
    entries = {"Dockerfile": sandbox_dir() / "Dockerfile"}
    entries.update({f"runtime/{name}": path for name, path in runtime_files().items()})
    for relative, path in entries.items():
        digest.update(relative.encode() + b"\0")
        data = path.read_bytes()
        digest.update(len(data).to_bytes(8, "big") + data)
    return digest.hexdigest()[:16]


def stage_runtime(target: Path) -> None:
    """Write the runtime into the existing directory ``target`` (dirs 0755, files 0644)."""
    for name, source in runtime_files().items():
        destination = target / name
        for parent in reversed(destination.relative_to(target).parents[:-1]):
            (target / parent).mkdir(mode=0o755, exist_ok=True)
        shutil.copyfile(source, destination)
        destination.chmod(0o644)


def stage_build_context(target: Path) -> None:
    """Write the Docker build context (``Dockerfile`` and ``runtime/``) into the directory ``target``."""
    shutil.copyfile(sandbox_dir() / "Dockerfile", target / "Dockerfile")
    runtime = target / "runtime"
    runtime.mkdir(mode=0o755)
    stage_runtime(runtime)


def install_runtime(base: Path) -> Path:
    """Copy the runtime to ``base/runtime-<digest>/`` (world-readable, host-owned); return that dir."""
    digest = runtime_digest()
    target = base / f"runtime-{digest}"
    if all((target / name).is_file() for name in runtime_files()):
        return target
    # A staging folder of its own: host processes starting at once (test workers, batch workers)
    # each stage a copy, and the first rename wins.
    staging = Path(tempfile.mkdtemp(prefix=f".runtime-{digest}-", suffix="-tmp", dir=base))
    stage_runtime(staging)
    staging.chmod(0o755)
    try:
        staging.rename(target)
    except OSError:  # another host process installed it first
        shutil.rmtree(staging, ignore_errors=True)
    return target
