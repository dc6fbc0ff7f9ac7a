"""The files that make a sandbox: the Dockerfile and the in-sandbox runtime, and their digest.

The digest labels a built image (``codemode.runtime``) so ``doctor`` can tell an image built from
another version of the runtime, and names the process backend's read-only copy of the runtime.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

from codemode._resources import resource_dir

__all__ = ["RUNTIME_FILES", "install_runtime", "runtime_digest", "sandbox_dir"]

RUNTIME_FILES = ("codemode_runtime.py", "codemode_boot.py")
BOOT_SCRIPT = "codemode_boot.py"


def sandbox_dir() -> Path:
    """The directory holding ``Dockerfile`` and ``runtime/``."""
    return resource_dir("sandbox")


def runtime_digest() -> str:
    """Short digest of the Dockerfile and the runtime files (what an image is built from)."""
    root = sandbox_dir()
    digest = hashlib.sha256()
    for relative in ["Dockerfile", *(f"runtime/{name}" for name in RUNTIME_FILES)]:
        digest.update(relative.encode() + b"\0")
        digest.update((root / relative).read_bytes())
    return digest.hexdigest()[:16]


def install_runtime(base: Path) -> Path:
    """Copy the runtime to ``base/runtime-<digest>/`` (world-readable, host-owned); return that dir."""
    digest = runtime_digest()
    target = base / f"runtime-{digest}"
    if all((target / name).is_file() for name in RUNTIME_FILES):
        return target
    staging = base / f".runtime-{digest}-tmp"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(mode=0o755)
    for name in RUNTIME_FILES:
        shutil.copyfile(sandbox_dir() / "runtime" / name, staging / name)
        (staging / name).chmod(0o644)
    staging.chmod(0o755)
    try:
        staging.rename(target)
    except OSError:  # another host process installed it first
        shutil.rmtree(staging, ignore_errors=True)
    return target
