"""Whether a file or folder is this user's alone: the checks behind every cache and store that
holds something another local user must not read, swap or plant (credentials, search indexes).

A private file is not enough in a folder others can write: they can add, rename or link entries
there (a symlink or hard link planted under the expected name), and the file itself still looks
private. So both the file and its folder are checked.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

__all__ = ["own", "owned_privately", "private_folder"]


def own(info: os.stat_result) -> bool:
    """Whether this user owns it (always, where the platform has no user ids)."""
    return not hasattr(os, "getuid") or info.st_uid == os.getuid()


def owned_privately(info: os.stat_result) -> bool:
    """Owned by this user, and writable by no one else."""
    return own(info) and not info.st_mode & 0o022


def private_folder(folder: Path) -> bool:
    """Whether only this user can add, rename or link files in ``folder``."""
    try:
        info = folder.stat()
    except OSError:
        return False
    return stat.S_ISDIR(info.st_mode) and owned_privately(info)
