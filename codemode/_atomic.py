"""Replace a file whole or not at all: what a crash, a full disk or a reader at the wrong moment
sees is the previous file or the new one, never part of one."""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

__all__ = ["replace_file"]


def replace_file(
    path: Path, write: Callable[[TextIO], object], *, mode: int = 0o666, keep_mode: bool = False
) -> None:
    """Call ``write`` on a new file beside ``path``, flush it to disk and rename it over ``path``;
    then sync the folder, so that the rename itself survives a power loss.

    The new file is created with ``mode`` (less the umask) and ``O_EXCL | O_NOFOLLOW``: it never
    writes through a file or link someone put there. ``keep_mode``: take the mode of the file it
    replaces, if there is one.
    """
    temp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    try:
        with os.fdopen(os.open(temp, flags, mode), "w", encoding="utf-8") as handle:
            if keep_mode:
                with contextlib.suppress(FileNotFoundError):
                    os.chmod(handle.fileno(), os.stat(path).st_mode & 0o7777)
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
    with contextlib.suppress(OSError):
        folder = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(folder)
        finally:
            os.close(folder)
