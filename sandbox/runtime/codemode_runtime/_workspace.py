"""The run's workspace inside the sandbox: written before a program starts, read back after it ends.

The host sends the files (``_wire.WorkspaceParams``); this module empties the workspace
directory, writes them, and when the program has ended walks the directory again without
following anything: regular files go back to the host, directories are walked, and anything else
(a link, a FIFO, a device, a socket) is reported as refused. Docker and bwrap give the directory a
size-capped tmpfs, so a write past the quota fails in the program itself (``ENOSPC``); the walk
checks the quota again for the backends that cannot cap it (the process backend, bwrap's file
count) and turns an overrun into the program's error. Either way the host then keeps nothing of
the run's workspace, and the workspace as it was before the run stays.
"""

from __future__ import annotations

import base64
import errno
import os
import shutil
import stat
from typing import Any, cast

from . import _wire as wire

QUOTA_ERROR = "WorkspaceQuotaExceeded"
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_QUOTA_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)

_directory: str | None = None
"""The workspace of this sandbox (``$CODEMODE_WORKSPACE_DIR`` at start), or None: it has none."""
_quota: tuple[int, int] = (0, 0)
"""The running program's quota: (bytes, files and directories)."""


def configure(directory: str | None) -> None:
    """Remember the workspace directory and show it to programs as ``$CODEMODE_WORKSPACE``."""
    global _directory
    _directory = directory or None
    if _directory is not None:
        os.environ[wire.WORKSPACE_ENV] = _directory


def prepare(params: Any) -> bool:
    """Make the workspace hold exactly the files in ``params`` (``WorkspaceParams``); False if none."""
    global _quota
    if params is None:
        return False
    if _directory is None:
        raise ValueError("run: this sandbox has no workspace directory")
    if not isinstance(params, dict):
        raise ValueError("run: 'workspace' must be an object")
    given = cast(dict[str, Any], params)
    files: Any = given.get("files")
    if not isinstance(files, dict):
        raise ValueError("run: 'workspace.files' must map paths to base64 text")
    _quota = (int(given.get("quota_bytes", 0)), int(given.get("quota_files", 0)))
    _empty(_directory)
    for name, encoded in cast(dict[Any, Any], files).items():
        if not isinstance(name, str) or not isinstance(encoded, str) or not _safe(name):
            raise ValueError(f"run: bad workspace file name {name!r}")
        path = os.path.join(_directory, *name.split("/"))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(base64.b64decode(encoded, validate=True))
    return True


def is_quota_error(exc: BaseException) -> bool:
    """Whether ``exc`` is a write the workspace's quota stopped."""
    if not isinstance(exc, OSError) or exc.errno not in _QUOTA_ERRNOS or _directory is None:
        return False
    filename = exc.filename if isinstance(exc.filename, str) else ""
    return not filename or os.path.abspath(filename).startswith(_directory.rstrip("/") + "/")


def quota_message(exc: OSError) -> str:
    """``exc``'s message, saying which quota it hit and what happens to the files."""
    where = f": {exc.filename!r}" if exc.filename else ""
    return (
        f"{exc.strerror or exc}{where}: the workspace is full ({_describe_quota()}); "
        "nothing this run wrote to the workspace is kept, its files from before the run are"
    )


def collect(program_failed_on_quota: bool) -> wire.WorkspaceReply:
    """The workspace at the program's end, or the reason nothing of it may be kept."""
    assert _directory is not None
    if program_failed_on_quota:
        return {"files": {}, "refused": {}, "error": "a write past the workspace quota failed"}
    regular: list[str] = []
    refused: dict[str, str] = {}
    total = entries = 0
    pending = [""]
    # Sizes first (from lstat): an overrun is found without reading a byte of it.
    while pending:
        prefix = pending.pop()
        with os.scandir(os.path.join(_directory, prefix) if prefix else _directory) as listing:
            for entry in sorted(listing, key=lambda e: e.name):
                name = f"{prefix}/{entry.name}" if prefix else entry.name
                info = entry.stat(follow_symlinks=False)
                if stat.S_ISDIR(info.st_mode):
                    entries += 1
                    pending.append(name)
                elif stat.S_ISREG(info.st_mode):
                    entries += 1
                    total += info.st_size
                    regular.append(name)
                else:
                    refused[name] = _kind(info.st_mode)
    quota_bytes, quota_files = _quota
    if total > quota_bytes or entries > quota_files:
        message = (
            f"the program left {total} bytes in {entries} files and directories in the workspace; "
            f"the quota is {_describe_quota()}: nothing this run wrote to the workspace is kept, "
            "its files from before the run are"
        )
        return {"files": {}, "refused": refused, "error": message}
    files: dict[str, str] = {}
    for name in regular:
        data = _read(os.path.join(_directory, *name.split("/")), quota_bytes)
        if data is None:
            refused[name] = "not a regular file of the quota's size when read"
            continue
        files[name] = base64.b64encode(data).decode("ascii")
    return {"files": files, "refused": refused, "error": None}


def _describe_quota() -> str:
    quota_bytes, quota_files = _quota
    return (
        f"{quota_bytes} bytes and {quota_files} files and directories ([workspace] quota_bytes, quota_files)"
    )


def _safe(name: str) -> bool:
    return not name.startswith("/") and all(part not in ("", ".", "..") for part in name.split("/"))


def _empty(directory: str) -> None:
    """Remove everything in ``directory`` (links are removed, never followed)."""
    with os.scandir(directory) as listing:
        for entry in listing:
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path)
            else:
                os.unlink(entry.path)


def _read(path: str, most: int) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            return None
        data = handle.read(most + 1)
        return data if len(data) <= most else None


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symbolic link (only regular files and directories are kept)"
    if stat.S_ISFIFO(mode):
        return "a FIFO (only regular files and directories are kept)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device (only regular files and directories are kept)"
    if stat.S_ISSOCK(mode):
        return "a socket (only regular files and directories are kept)"
    return "not a regular file or directory"
