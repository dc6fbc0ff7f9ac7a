"""Building the sandbox image (``codemode sandbox build``).

The image is ``sandbox/Dockerfile`` on top of a base with Python >= 3.11. The base is, in order:
the one asked for (``--base``), else ``python:3.11-slim`` when it is present or can be pulled,
else a Debian bookworm base made here from Debian packages (``debootstrap --variant=minbase
--include=python3`` from the mirror apt already uses, then ``docker import``) — for machines that
reach a Debian mirror but no container registry. Re-running is cheap: the Debian base is kept,
and an image whose labels show the same runtime digest and base is not rebuilt.

The build context is staged in a temporary directory (``_files.stage_build_context``): the
Dockerfile and the runtime with the wire contract copied in from the host package. The runtime
digest covers all of it, so a change to the runtime or to the wire contract rebuilds the image.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from codemode.errors import SandboxError
from codemode.sandbox._docker import RUNTIME_LABEL
from codemode.sandbox._docker_api import DockerApi, docker_api
from codemode.sandbox._files import runtime_digest, stage_build_context

__all__ = ["BASE_IMAGE_DEFAULT", "DEBIAN_BASE_IMAGE", "BuildResult", "build_image", "debian_mirror"]

BASE_IMAGE_DEFAULT = "python:3.11-slim"
DEBIAN_BASE_IMAGE = "codemode-base:bookworm"
DEBIAN_SUITE = "bookworm"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
BASE_LABEL = "codemode.base"
# Left out of the imported base: package caches and documentation (about a fifth of the size).
_EXCLUDES = (
    "./var/cache/apt/archives/*.deb",
    "./usr/share/doc/*",
    "./usr/share/man/*",
    "./var/lib/apt/lists/*",
)

BaseSource = Literal["local", "pulled", "debian-existing", "debootstrap"]
Progress = Callable[[str], None]


@dataclass(frozen=True)
class BuildResult:
    image: str
    image_id: str
    base: str
    base_source: BaseSource
    rebuilt: bool
    """False when the image was already up to date."""


def _quiet(_: str) -> None:
    pass


def debian_mirror(sources: Sequence[Path] | None = None) -> str:
    """The Debian mirror apt uses here (deb822 ``URIs:`` or a ``deb`` line), else deb.debian.org."""
    candidates: list[Path] = []
    if sources is not None:
        candidates = list(sources)
    else:
        sources_d = Path("/etc/apt/sources.list.d")
        if sources_d.is_dir():
            candidates += sorted(sources_d.glob("*.sources")) + sorted(sources_d.glob("*.list"))
        candidates.append(Path("/etc/apt/sources.list"))
    for path in candidates:
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        for stanza in re.split(r"\n\s*\n", text):
            if path.suffix == ".sources":
                uris = re.search(r"^URIs:\s*(\S+)", stanza, re.MULTILINE)
                suites = re.search(r"^Suites:\s*(.+)$", stanza, re.MULTILINE)
                if (
                    uris
                    and suites
                    and DEBIAN_SUITE in suites.group(1).split()
                    and "security" not in uris.group(1)
                ):
                    return uris.group(1)
            else:
                for line in stanza.splitlines():
                    match = re.match(r"\s*deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+(\S+)", line)
                    if match and match.group(2) == DEBIAN_SUITE and "security" not in match.group(1):
                        return match.group(1)
    return DEFAULT_MIRROR


def _debootstrap_base(api: DockerApi, progress: Progress, detail: Progress, mirror: str | None) -> None:
    if os.geteuid() != 0:
        raise SandboxError(
            "no base image is available and building one with debootstrap needs root: run "
            "`sudo codemode sandbox build`, or pass `--base IMAGE` (any image with python3 >= 3.11)"
        )
    debootstrap = shutil.which("debootstrap") or (
        "/usr/sbin/debootstrap" if Path("/usr/sbin/debootstrap").exists() else None
    )
    if debootstrap is None:
        raise SandboxError(
            "debootstrap is not installed: `apt-get install debootstrap` (or pass `--base IMAGE`)"
        )
    if shutil.which("tar") is None:
        raise SandboxError("tar is not installed")
    mirror = mirror or debian_mirror()
    workdir = Path(tempfile.mkdtemp(prefix="codemode-rootfs-", dir="/var/tmp"))
    rootfs = workdir / "rootfs"
    try:
        progress(f"debootstrap: Debian {DEBIAN_SUITE} (minbase + python3) from {mirror} (about a minute)")
        proc = subprocess.Popen(
            [debootstrap, "--variant=minbase", "--include=python3", DEBIAN_SUITE, str(rootfs), mirror],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        assert proc.stdout is not None
        tail: list[str] = []
        for line in proc.stdout:
            line = line.rstrip()
            if line:
                detail(line)
                tail = [*tail[-9:], line]
        if proc.wait() != 0:
            raise SandboxError("debootstrap failed:\n" + "\n".join(tail))
        progress(f"docker import: {DEBIAN_BASE_IMAGE}")
        excludes = [f"--exclude={pattern}" for pattern in _EXCLUDES]
        tar = subprocess.Popen(
            ["tar", "-C", str(rootfs), "--numeric-owner", *excludes, "-cf", "-", "."],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert tar.stdout is not None
        repository, _, tag = DEBIAN_BASE_IMAGE.partition(":")
        try:
            api.import_stream(tar.stdout, repository, tag)
        finally:
            tar.stdout.close()
            _, err = tar.communicate()
        if tar.returncode != 0:
            raise SandboxError(f"tar failed: {err.decode(errors='replace')[-500:]}")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _resolve_base(
    api: DockerApi, base: str | None, progress: Progress, detail: Progress, mirror: str | None, pull: bool
) -> tuple[str, BaseSource]:
    wanted = base or BASE_IMAGE_DEFAULT
    if api.image(wanted) is not None:
        progress(f"base image {wanted}: present")
        return wanted, "local"
    if base is None and api.image(DEBIAN_BASE_IMAGE) is not None:
        # A Debian base built here earlier means no registry answered then: do not ask again.
        progress(f"base image {DEBIAN_BASE_IMAGE}: present (built earlier from Debian packages)")
        return DEBIAN_BASE_IMAGE, "debian-existing"
    if not pull:
        if base is not None and base != DEBIAN_BASE_IMAGE:
            raise SandboxError(f"base image {base} is not present, and pulling is off (--no-pull)")
        progress(f"not pulling {wanted} (--no-pull / CODEMODE_NO_PULL); building a Debian base instead")
    elif wanted != DEBIAN_BASE_IMAGE:
        progress(f"base image {wanted}: pulling")
        failure = api.pull(wanted)
        if failure is None:
            return wanted, "pulled"
        if base is not None:
            raise SandboxError(f"base image {wanted} is not present and cannot be pulled: {failure}")
        progress(f"cannot pull {wanted} ({failure}); using a Debian base built from packages instead")
    # Here the Debian base is not present: the checks above would have returned it.
    _debootstrap_base(api, progress, detail, mirror)
    return DEBIAN_BASE_IMAGE, "debootstrap"


def build_image(
    image: str,
    *,
    base: str | None = None,
    force: bool = False,
    progress: Progress = _quiet,
    detail: Progress = _quiet,
    mirror: str | None = None,
    pull: bool | None = None,
) -> BuildResult:
    """Build (or confirm up to date) the sandbox image ``image``. Blocking; reports via callbacks.

    ``progress`` receives one line per step, ``detail`` the tools' own output.
    ``pull=False`` (default: on unless ``CODEMODE_NO_PULL=1``) never asks a registry for the base
    image: it uses one present locally or builds a Debian base from the distribution's packages.
    Raises :class:`SandboxUnavailableError` without a Docker engine, :class:`SandboxError` on failure.
    """
    if pull is None:
        pull = os.environ.get("CODEMODE_NO_PULL", "") not in ("1", "true", "yes")
    api = docker_api()
    try:
        base_name, source = _resolve_base(api, base, progress, detail, mirror, pull)
        base_info = api.image(base_name)
        if base_info is None:
            raise SandboxError(f"base image {base_name} vanished during the build")
        digest = runtime_digest()
        current = api.image(image)
        if (
            not force
            and current is not None
            and current[1].get(RUNTIME_LABEL) == digest
            and current[1].get(BASE_LABEL) == base_info[0]
        ):
            progress(f"{image} is up to date (runtime {digest}, base {base_name})")
            return BuildResult(image, current[0], base_name, source, rebuilt=False)
        progress(f"docker build: {image} FROM {base_name}")
        with tempfile.TemporaryDirectory(prefix="codemode-build-") as context:
            stage_build_context(Path(context))
            for line in api.build(
                Path(context),
                tag=image,
                buildargs={"BASE_IMAGE": base_name},
                labels={RUNTIME_LABEL: digest, BASE_LABEL: base_info[0]},
            ):
                detail(line)
        built = api.image(image)
        if built is None:
            raise SandboxError(f"docker build finished but {image} is not present")
        progress(f"built {image} ({built[0][:19]})")
        if current is not None and current[0] != built[0] and api.remove_image(current[0]):
            progress(f"removed the previous build ({current[0][:19]})")
        return BuildResult(image, built[0], base_name, source, rebuilt=True)
    finally:
        api.close()
