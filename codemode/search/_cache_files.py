"""The files behind the search caches: where they live, and how they are written and read back.

Entries live in ``$CODEMODE_CACHE_DIR/search``, else ``$XDG_CACHE_HOME/codemode/search``, else
``~/.cache/codemode/search``. Index entries (:mod:`codemode.search._catalog_cache`), config memos
(:mod:`codemode.cli._search_cache`) and query-tokenizer tables (:mod:`codemode.search._bpe`) are
sealed with their sha256 (:func:`write_sealed`); tool vectors (:class:`~codemode.search.EmbeddingCache`)
are written atomically. Every file is read through :func:`read_private`, which trusts it only if this
user alone could have written it and the folder that holds it.

A module of its own, below the index, the cache and the embedder that all use it, so none of them
imports another just to reach a file.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

from codemode._private_files import own, owned_privately, private_folder

__all__ = ["cache_dir", "read_private", "read_sealed", "write_atomic", "write_sealed"]

_KEEP = 16  # files of one kind: index entries are one per catalog version and principal
_DIGEST_BYTES = 32


def cache_dir() -> Path:
    explicit = os.environ.get("CODEMODE_CACHE_DIR")
    if explicit:
        return Path(explicit) / "search"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "codemode" / "search"


def read_private(path: Path) -> bytes:
    """The bytes of ``path`` when only this user could have written it; else :class:`OSError`.

    Entries are read with :mod:`marshal` (four times faster than JSON here, which matters within a
    300 ms cold start). It builds plain values and runs no code, but it is not hardened against crafted
    input, so an entry someone else could have written is ignored and rebuilt. The checks are made on
    the open file, not on its name, so the file cannot be swapped between the check and the read, and
    a symbolic link is never followed.
    """
    if not private_folder(path.parent):
        raise PermissionError(f"{path.parent} can be written by another user")
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    with open(fd, "rb") as f:
        info = os.fstat(fd)
        if not (stat.S_ISREG(info.st_mode) and owned_privately(info)):
            raise PermissionError(f"{path} could have been written by another user")
        return f.read()


def write_atomic(path: Path, data: bytes, keep: int = _KEEP) -> bool:
    """Write ``path`` atomically, then delete all but the ``keep`` newest files of its folder with
    its suffix; whether it was stored (a failure only costs speed: the next process builds the file
    again)."""
    import tempfile  # here: ~3 ms to import, and a cached search writes nothing

    folder = path.parent
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not private_folder(folder) and not _made_private(folder):
            return False  # it would never be read back (see read_private)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=folder)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
        entries = sorted(folder.glob(f"*{path.suffix}"), key=lambda p: p.stat().st_mtime, reverse=True)
        for old in entries[keep:]:
            old.unlink(missing_ok=True)
    except OSError:
        return False
    return True


def _made_private(folder: Path) -> bool:
    """Close a cache folder of this user's that others may write (made by an older version, or
    under a umask of 002) and empty it: what it holds now could have been put there by anyone, and
    a cache costs only a rebuild. False for a folder of another user, which is left alone."""
    info = folder.stat()
    if not (stat.S_ISDIR(info.st_mode) and own(info)):
        return False
    folder.chmod(0o700)
    for entry in folder.iterdir():
        if entry.is_symlink() or entry.is_file():  # a link itself, never what it points to
            entry.unlink(missing_ok=True)
    return private_folder(folder)


def write_sealed(path: Path, payload: bytes, keep: int = _KEEP) -> bool:
    """Write ``payload`` behind its sha256 (see :func:`read_sealed`), atomically; keep ``keep`` files."""
    return write_atomic(path, hashlib.sha256(payload).digest() + payload, keep)


def read_sealed(path: Path) -> memoryview | None:
    """The payload :func:`write_sealed` stored at ``path`` (a view, not a copy); None when the file is
    missing, could have been written by another user, or is damaged (truncated, or any byte changed:
    its sha256 differs).

    Index entries, config memos and tokenizer tables are sealed: loading trusts the structure of
    what it reads, so damage must be refused here, not crash the query that reads the damaged part.
    Hashing costs about 1 ms per MB (an index entry for 3,500 tools is 1.3 MB, 5 MB with vectors).
    """
    try:
        data = memoryview(read_private(path))
    except OSError:
        return None
    digest, payload = data[:_DIGEST_BYTES], data[_DIGEST_BYTES:]
    if len(digest) != _DIGEST_BYTES or hashlib.sha256(payload).digest() != digest.tobytes():
        return None
    return payload
