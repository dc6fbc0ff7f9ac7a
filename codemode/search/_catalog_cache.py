"""A search index cached on disk, so ``codemode search`` answers without rendering the catalog.

A cold process that must parse codemode.lock, render the stub tree and tokenise every tool spends
about a second at 3,000 tools; loading a cached index takes about 10 ms. The cache is
content-addressed: its key hashes the lock's bytes, the configured servers, the principal's policy
and this package's source, so any change to what is searched, who searches or how it is ranked
names a different file, and a stale entry is never read.

Each entry holds the index (:meth:`ToolIndex.to_bytes`: BM25 and, for a hybrid index, the tool
vectors; callers put the model's id in the key, and loading checks it again) and, per tool, the
fields of a search result at ``summary`` detail. Entries live in ``$CODEMODE_CACHE_DIR``, else
``$XDG_CACHE_HOME/codemode/search``, else ``~/.cache/codemode/search``; only the most recent few
are kept. Beside them: ``config/`` (what ``codemode search`` took from a validated config, see
:mod:`codemode.cli._search_cache`) and ``tokenizer/`` (the query tokenizer's table, see
:mod:`codemode.search._bpe`), both sealed with their sha256 (:func:`write_sealed`), as entries are.
Every file is read through :func:`read_private`, which trusts it only if this user alone could have
written it and the folder that holds it.
"""

from __future__ import annotations

import functools
import hashlib
import marshal
import os
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from codemode._private_files import own, owned_privately, private_folder
from codemode.search._index import ToolIndex
from codemode.search._semantic import Embedder

__all__ = [
    "CachedRow",
    "CachedSearch",
    "cache_dir",
    "cache_key",
    "read_private",
    "read_sealed",
    "write_atomic",
    "write_sealed",
]

_FORMAT = "codemode-search-cache-4"
_KEEP = 16  # entries: one per catalog version and principal; older ones are deleted


def cache_dir() -> Path:
    explicit = os.environ.get("CODEMODE_CACHE_DIR")
    if explicit:
        return Path(explicit) / "search"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "codemode" / "search"


@functools.cache
def _source_hash(folder: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(folder.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def cache_key(parts: Iterable[bytes | str], code: Iterable[Path] = ()) -> str:
    """The entry name for a search over ``parts`` (lock bytes, server names, policy ...).

    The key also hashes this package's source and that of the folders in ``code`` (what renders the
    rows), so an index or a summary written by another version of the code is never reused.
    """
    digest = hashlib.sha256(_FORMAT.encode())
    for folder in (Path(__file__).parent, *code):
        digest.update(_source_hash(folder).encode())
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        digest.update(len(data).to_bytes(8, "little") + data)  # length-prefixed: parts cannot run together
    return digest.hexdigest()


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


def _row_fields(row: CachedRow) -> tuple[str, ...]:
    return (row.server, row.tool, row.module, row.path, row.import_line, row.summary)


_ROW_FIELDS = 6
_HEAD_BYTES = 8
_DIGEST_BYTES = 32


@dataclass(frozen=True, slots=True)
class CachedRow:
    """What a search result shows for one tool, besides its score and detail."""

    server: str
    tool: str
    module: str
    path: str
    import_line: str
    summary: str
    """The result text at ``summary`` detail (at ``name`` detail the text is ``module``)."""


class CachedSearch:
    """An index plus the rows it returns, loaded from or saved to one cache entry."""

    __slots__ = ("_fields", "index")

    def __init__(self, index: ToolIndex, rows: Mapping[str, CachedRow]) -> None:
        self.index = index
        self._fields = {key: _row_fields(row) for key, row in rows.items()}
        """Per key, the fields of its :class:`CachedRow`: a row object is made only for a result."""

    @property
    def rows(self) -> dict[str, CachedRow]:
        return {key: CachedRow(*fields) for key, fields in self._fields.items()}

    @property
    def ranker(self) -> str:
        """``hybrid`` (BM25 fused with embeddings) or ``bm25``: what answers :meth:`search`."""
        return "hybrid" if self.index.hybrid else "bm25"

    def search(self, query: str, k: int) -> list[tuple[CachedRow, float]]:
        fields = self._fields
        return [
            (CachedRow(*fields[hit.key]), hit.score)
            for hit in self.index.search(query, k)
            if hit.key in fields
        ]

    def to_bytes(self) -> bytes:
        # The rows' length, the rows, then the index: loading reads the index in place (no copy).
        head = marshal.dumps((_FORMAT, self._fields))
        return len(head).to_bytes(_HEAD_BYTES, "little") + head + self.index.to_bytes()

    @classmethod
    def from_bytes(cls, data: bytes | memoryview, embedder: Embedder | None = None) -> CachedSearch:
        """The entry :meth:`to_bytes` wrote; a hybrid one needs its ``embedder`` (:class:`ValueError`).

        Loading trusts the index's structure past a few checks, so bytes from a file must be sealed:
        :meth:`save` and :meth:`load` keep entries behind their sha256 (:func:`write_sealed`).
        """
        view = memoryview(data)
        size = int.from_bytes(view[:_HEAD_BYTES], "little")
        try:
            if len(view) < _HEAD_BYTES + size:
                raise ValueError("truncated")
            form, table = marshal.loads(view[_HEAD_BYTES : _HEAD_BYTES + size])  # noqa: S302 - see read_private
            if form != _FORMAT:
                raise ValueError("another cache format")
        except (EOFError, TypeError, ValueError, SystemError) as exc:  # marshal's errors for bad data
            raise ValueError(f"not a search cache entry: {exc}") from exc
        if not isinstance(table, dict):
            raise ValueError("not a search cache entry: no rows")
        fields = cast("dict[object, object]", table)
        if not all(isinstance(row, tuple) and len(row) == _ROW_FIELDS for row in fields.values()):  # pyright: ignore[reportUnknownArgumentType]
            raise ValueError("not a search cache entry: damaged rows")
        found = cls(ToolIndex.from_bytes(view[_HEAD_BYTES + size :], embedder), {})
        found._fields = cast("dict[str, tuple[str, ...]]", fields)
        return found

    @classmethod
    def load(
        cls, key: str, directory: Path | None = None, embedder: Embedder | None = None
    ) -> CachedSearch | None:
        """The entry ``key``, or None when it is missing, unreadable, truncated or of another model
        (then the caller rebuilds it: a damaged entry costs one slow search, never a wrong one)."""
        data = read_sealed((directory or cache_dir()) / f"{key}.bin")
        try:
            return cls.from_bytes(data, embedder) if data is not None else None
        except ValueError:
            return None

    def save(self, key: str, directory: Path | None = None) -> bool:
        """Write the entry sealed and atomically, and drop the oldest beyond a few; whether it was
        stored (a failure only costs speed)."""
        return write_sealed((directory or cache_dir()) / f"{key}.bin", self.to_bytes())


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
